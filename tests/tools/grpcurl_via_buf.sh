#!/usr/bin/env bash
# `grpcurl` for the README recipe test (tests/e2e/readme_recipes_test.cc): Debian 12 has no
# grpcurl, so the README's grpcurl lines run through `buf curl` ($BUF), which takes the same JSON
# through reflection. Only what the README uses is translated:
#   grpcurl -plaintext [-H HEADER]... [-d DATA | -d @ (standard input)] ADDR list
#   grpcurl -plaintext ... ADDR describe SERVICE      (lists the service's methods)
#   grpcurl -plaintext ... ADDR SERVICE/METHOD
# Anything else exits 2 naming what it does not know, so a README line this cannot run fails the
# test instead of being skipped.
set -euo pipefail
buf=${BUF:?BUF: the buf binary}
flags=(--protocol grpc --http2-prior-knowledge)
stdin_file=""
trap '[ -z "$stdin_file" ] || rm -f "$stdin_file"' EXIT
while [ $# -gt 0 ]; do
  case "$1" in
    -plaintext) shift ;;
    -H)
      flags+=(-H "$2")
      shift 2
      ;;
    -d)
      if [ "$2" = "@" ]; then
        stdin_file=$(mktemp)
        cat >"$stdin_file"
        flags+=(-d "@$stdin_file")
      else
        flags+=(-d "$2")
      fi
      shift 2
      ;;
    -*)
      echo "grpcurl_via_buf: unknown flag $1" >&2
      exit 2
      ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || {
  echo "grpcurl_via_buf: expected ADDR and a verb or method, got: $*" >&2
  exit 2
}
addr=$1
verb=$2
case "$verb" in
  list) "$buf" curl "${flags[@]}" --list-services "http://$addr" ;;
  describe)
    [ $# -eq 3 ] || {
      echo "grpcurl_via_buf: describe needs one service" >&2
      exit 2
    }
    # buf lists every method as SERVICE/METHOD; the service's own, or failure when it has none.
    "$buf" curl "${flags[@]}" --list-methods "http://$addr" | grep "^$3/"
    ;;
  */*) "$buf" curl "${flags[@]}" "http://$addr/$verb" ;;
  *)
    echo "grpcurl_via_buf: unknown verb or method '$verb'" >&2
    exit 2
    ;;
esac
