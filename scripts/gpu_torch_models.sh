#!/usr/bin/env bash
# Real models, native PyTorch against ucudnn.torch (issue 20), on a GPU machine in one command:
# the stack from a bundle (PostgreSQL, planner server, cuDNN worker on PyTorch's own cuDNN;
# scripts/stack_lib.sh), then bench/torch_models.py's suite over the rows given. The database may
# start warm from an earlier machine's dump (--warm-db), and is dumped at the end ($OUT/warm_db.sql.gz)
# for the next one.
#
#   On the development machine:  cmake --build build -j2
#                                scripts/bundle.sh --with-postgres --with-client \
#                                  --only "ucudnn ucudnn-server ucudnn-worker"
#   On the GPU machine (repo root, .bundle/ carried along):
#     bash scripts/gpu_torch_models.sh [BUNDLE_DIR=.bundle] [--warm-db FILE] [--python PY]
#          [--warm-wait-s 240] [--repeats 2] [--steps 30] [--deadline-s 420] [--budget-s 480]
#          [--kernels MODEL:PRECISION ...] [--grads MODEL:PRECISION ...]
#          [--paired MODEL:PRECISION[:VARIANT[:COMPILE]] ...] [--host-profile]
#          [--paired-rounds 8] [--paired-steps 8] [--paired-route auto|measure|rule]
#          [--after-restore-sql SQL] [--then-warm MODEL:PRECISION ...] [--overhead]
#          [--overhead-against ADAPTER_DIR]
#          [--warm-then-stop-worker S] [--converted-wait-s S] [--cap-gib G]
#          [--step-memory MODEL:PRECISION ...] [--caps N] [--max-batch-cap-gib G]
#          [--max-batch-range LOW:HIGH] [--max-batch-step N] [--only-max-batch] [--no-curve]
#          [--memory-trace]
#          [--curve MODEL:PRECISION ...] [--cpus LIST] -- ROW [ROW ...]
#     ROW: MODEL:PRECISION[:COMPILE][:cap], e.g. resnet50:amp convnext_tiny:amp resnet50:amp:default
#     A ":cap" row runs both sides under a process memory cap: --cap-gib G, else native's
#     unlimited peak + 2% (one more native run measures it).
#     --warm-then-stop-worker S gives the worker at most S seconds to benchmark the rows' models
#     (torch_models.py warm), then stops it, so that no measured job shares the GPU with it (the
#     server then holds no converted job's request: --server-wait-s 0);
#     --converted-wait-s: how long a converted job's prepare() waits for the planner's answers;
#     --kernels first writes the per-kernel side-by-side of those models (kernels_*.json; each
#     kernel timed alone, back to back and with the L2 flushed before each run);
#     --grads one step's gradients, converted against native (grads_*.json); --paired native and
#     converted in one process, steps interleaved in rounds (paired_*.json in runs.tar.gz, the
#     ratio in stack.log; VARIANT (fallback, all-framework, all-plans, device-bound or empty) as
#     in a row, COMPILE a torch.compile mode for both sides; --host-profile adds
#     where each side's host time goes; --paired-route rule: the plans' step as the layers' rule
#     routes it, not as a measured route would); --after-restore-sql
#     runs SQL on the database before anything else (say, to forget some timings); --then-warm,
#     after the suite and within the budget, fills the database with those models' plans and
#     PyTorch's own times for the next machine (warm_db.sql.gz); --overhead first measures the
#     adapter's host time per layer and step (bench/torch_adapter.py overhead: overhead.json in
#     runs.tar.gz), what convert()'s min_layer_gain_us stands for (--overhead-against DIR: and the
#     adapter package under DIR, relative to the repository root, alternately with this tree's,
#     twice each: overhead_N_NAME.json); --step-memory first runs
#     bench/step_memory.py for those models (issue 21: liveness budgets, caps, the curve):
#     step_memory.json and curve_*.svg (--caps: how many cap levels, default 3); with
#     --max-batch-cap-gib, also each side's largest batch under that cap (--max-batch-range: the
#     batches probed; --only-max-batch: that search alone; --memory-trace: the converted
#     liveness runs trace their step's memory against their profile); --curve only the step's curve and
#     its predictions against the measured step (torch_models.py curve --check: curve_*.json in
#     runs.tar.gz, the check in stack.log); --cpus runs the suite's and the paired runs on those
#     CPUs only (a host-bound step's time depends on where it lands).
#   Without a GPU, a smoke test (CPU backend and worker, toy sizes):
#     bash scripts/gpu_torch_models.sh --cpu --python /usr/bin/python3 -- resnet50:fp32
#
# Results go to $OUT (or ./torch-models-results), few files and written as they come, so that a
# run cut short still returns what it measured: torch_models.json (rewritten after every row) and
# .md, stack.log, logs.txt, warm_db.sql.gz, runs.tar.gz (every run's JSON and runs.log). The
# newest rows are kept in bench/results/<gpu>/{torch_models,step_memory}.json (docs/results.md;
# `python3 bench/torch_models.py plot` and `bench/step_memory.py plot` redraw docs/img/).
# --budget-s S stops the measuring after S seconds (default 480), leaving time for the dump: a
# model run that would start with 30 s or less left is skipped, and one still running is stopped.
# Exit 1 when a run failed.
set -uo pipefail

bundle=".bundle"
python=/opt/torch/.venv/bin/python3
warm_db=""
budget_s=480
suite_args=()
kernel_rows=()
grad_rows=()
paired_rows=()
paired_args=()
then_warm=()
warm_then_stop=""
warm_args=()
overhead=0
overhead_against=""
memory_rows=()
memory_args=()
curve_rows=()
after_restore_sql=""
backend=cudnn
device=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --warm-db) warm_db="$2"; shift 2 ;;
    --budget-s) budget_s="$2"; shift 2 ;;
    --batch|--image-size) suite_args+=("$1" "$2"); warm_args+=("$1" "$2"); shift 2 ;;
    --warm-wait-s|--repeats|--steps|--deadline-s|--run-timeout-s|--converted-wait-s|--cap-gib)
      suite_args+=("$1" "$2"); shift 2 ;;
    --option) suite_args+=("--option" "$2"); shift 2 ;;
    --kernels) kernel_rows+=("$2"); shift 2 ;;
    --grads) grad_rows+=("$2"); shift 2 ;;
    --paired) paired_rows+=("$2"); shift 2 ;;
    --host-profile) paired_args+=(--host-profile); shift ;;
    --paired-rounds) paired_args+=(--rounds "$2"); shift 2 ;;
    --paired-steps) paired_args+=(--steps "$2"); shift 2 ;;
    --paired-route) paired_args+=(--route "$2"); shift 2 ;;
    --then-warm) then_warm+=("$2"); shift 2 ;;
    --warm-then-stop-worker) warm_then_stop="$2"; shift 2 ;;
    --overhead) overhead=1; shift ;;
    --overhead-against) overhead_against="$2"; shift 2 ;;
    --step-memory) memory_rows+=("$2"); shift 2 ;;
    --max-batch-cap-gib|--max-batch-range|--max-batch-step|--caps)
      memory_args+=("$1" "$2"); shift 2 ;;
    --only-max-batch|--memory-trace|--no-curve) memory_args+=("$1"); shift ;;
    --curve) curve_rows+=("$2"); shift 2 ;;
    --cpus) suite_args+=(--cpus "$2"); paired_args+=(--cpus "$2"); shift 2 ;;
    --after-restore-sql) after_restore_sql="$2"; shift 2 ;;
    --cpu) backend=cpu; device=cpu; suite_args+=(--batch 4 --image-size 64 --steps 4 --repeats 1)
      memory_args+=(--batch 4 --image-size 64 --steps 4 --wait-s 20)
      paired_args+=(--batch 4 --image-size 64 --rounds 2 --steps 1); shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,48p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_torch_models.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) bundle="$1"; shift ;;
  esac
done
[ $# -gt 0 ] || [ "${#memory_rows[@]}" -gt 0 ] || [ "${#paired_rows[@]}" -gt 0 ] ||
  [ "${#curve_rows[@]}" -gt 0 ] || [ "${#kernel_rows[@]}" -gt 0 ] || [ "${#grad_rows[@]}" -gt 0 ] ||
  [ "$overhead" = 1 ] || [ "${#then_warm[@]}" -gt 0 ] ||
  { echo "gpu_torch_models.sh: no rows given (see --help)" >&2; exit 2; }
results="${OUT:-$(pwd)/torch-models-results}"
runs="$(mktemp -d /tmp/ucudnn-runs.XXXXXX)"
mkdir -p "$results"
started=$SECONDS
time_left() { echo $((budget_s - (SECONDS - started))); }  # seconds of --budget-s left
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/stack_lib.sh
. "$root/scripts/stack_lib.sh"
log() { echo "[gpu_torch_models $(date +%T)] $*" | tee -a "$results/stack.log" >&2; }
# torch_models.py warm NAME LIMIT_S DEADLINE_S ARGS...: the rows' plans in the database. The
# warm-up keeps DEADLINE_S itself; the timeout (LIMIT_S, then a kill) is the backstop. Its output
# goes to $runs/NAME.log, not a pipe, which a process left behind would hold open (session 40:
# the step hung 100 s past its 200), and its tail to stack.log.
warm_rows() {
  local name="$1" limit_s="$2" deadline_s="$3"
  shift 3
  timeout -k 10 "$limit_s" "$python" "$root/bench/torch_models.py" warm --server "$server_addr" \
    --runs-dir "$runs" --device "$device" --deadline-s "$deadline_s" "$@" >"$runs/$name.log" 2>&1
  tail -n 20 "$runs/$name.log" >>"$results/stack.log"
}
# Every run's JSON and runs.log, without the compiled plans and torch.compile's caches (the
# machine's, not results; the plans' count and size go to stack.log).
pack_runs() {
  if [ -d "$runs/compiled_plans" ]; then
    log "compiled plans: $(find "$runs/compiled_plans" -name '*.plan' | wc -l) files, $(du -sh "$runs/compiled_plans" | cut -f1)"
  fi
  tar -czf "$results/runs.tar.gz" --exclude=./compiled_plans --exclude=./compile_caches \
    -C "$runs" . 2>/dev/null
}
die() { log "$*"; exit 1; }

stack_prepare_torch "$python" "$device" || exit 1
[ -z "$warm_db" ] || warm_db="$(cd "$(dirname "$warm_db")" && pwd)/$(basename "$warm_db")"

stack_start || die "the stack did not start"
ucudnn health --server "$server_addr" >/dev/null 2>&1 || die "the planner server did not start"
log "torch $("$python" -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())')"

if [ -n "$after_restore_sql" ]; then
  "$bundle/lib/postgresql/15/bin/psql" -q -v ON_ERROR_STOP=1 "$stack_db_url" -c "$after_restore_sql" |
    tee -a "$results/stack.log" || die "--after-restore-sql failed"
fi
rc=0
wait_options=(--prepare-wait-s 240 --option server_wait_ms=240000 --option deadline_ms=270000)
if [ "$overhead" = 1 ]; then
  # This tree's adapter, and where --overhead-against names another, the two alternately twice
  # (one machine's host speed drifts: a ratio from side-by-side runs).
  overhead_runs=(python)
  [ -z "$overhead_against" ] || overhead_runs=(python "$overhead_against" python "$overhead_against")
  for i in "${!overhead_runs[@]}"; do
    adapter="${overhead_runs[$i]}"
    json="$runs/overhead.json"
    [ -z "$overhead_against" ] || json="$runs/overhead_${i}_$(basename "$adapter").json"
    "$python" "$root/bench/torch_adapter.py" overhead --device "$device" --adapter "$root/$adapter" \
      --option "server=$server_addr" --option cache_path=off --option policy=undivided \
      --option server_wait_ms=60000 --option deadline_ms=90000 --prepare-wait-s 60 --json-out "$json" >>"$runs/runs.log" 2>&1 ||
      { log "overhead failed (runs.log)"; rc=1; }
    "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("adapter", sys.argv[2], "host overhead per layer and step:", round(d["overhead_us_per_layer_step"], 2), "us (native", round(d["native_us_per_layer_step"], 2), "us)")' \
      "$json" "$adapter" 2>/dev/null | tee -a "$results/stack.log"
  done
fi
# One bench/torch_models.py subcommand against the stack: its JSON into $runs/COMMAND_TAG.json,
# its output into runs.log, then SUMMARY (Python over d, the JSON, and sys.argv[2], the tag)
# into stack.log.
model_run() {  # COMMAND TAG SUMMARY [ARG ...]
  local command="$1" tag="$2" summary="$3"
  shift 3
  local json="$runs/${command}_${tag//:/_}.json"
  local left
  left=$(time_left)
  if [ "$left" -le 30 ]; then
    log "$command $tag skipped: no time left (--budget-s $budget_s)"; rc=1; return
  fi
  timeout "$left" "$python" "$root/bench/torch_models.py" "$command" "$@" --device "$device" \
    --option "server=$server_addr" --option cache_path=off "${wait_options[@]}" \
    --json-out "$json" >>"$runs/runs.log" 2>&1 || { log "$command $tag failed (runs.log)"; rc=1; }
  [ -z "$summary" ] || "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); $summary" \
    "$json" "$tag" 2>/dev/null | tee -a "$results/stack.log"
  # What ran so far comes back even if the call is cut short after this.
  pack_runs
}
for g in "${grad_rows[@]}"; do
  model_run grads "$g" 'print(sys.argv[2], "worst", d["worst_rel_error"], "ok", d["ok"], "planned", d["planned_calls"])' \
    --model "${g%%:*}" --precision "${g#*:}"
done
for p in "${paired_rows[@]}"; do
  IFS=: read -r p_model p_precision p_variant p_compile <<<"$p"
  model_run paired "$p" 'print(sys.argv[2], "paired: native", round(d["native_ms"], 2), "ms, converted", round(d["converted_ms"], 2), "ms, ratio", round(d["ratio"], 4), "range", [round(r, 4) for r in d["ratio_range"]], d["calls_per_step"])' \
    --model "$p_model" --precision "$p_precision" --variant "${p_variant:-}" \
    --compile "${p_compile:-}" "${paired_args[@]}"
done
for c in "${curve_rows[@]}"; do
  model_run curve "$c" '[print(sys.argv[2], "check", r["budget"], "predicted", round(r["predicted_ms"], 2), "ms (curve", r["curve_predicted_ms"] and round(r["curve_predicted_ms"], 2), "ms), measured", round(r["measured_ms"], 2), "ms, error", None if r["error"] is None else round(r["error"], 4), "planned calls", r["planned_calls"], "ran", r["planned_calls_per_step"], "forward", round(r["predicted_forward_ms"], 2), "->", round(r["measured_forward_ms"], 2)) for r in d["check"]]' \
    --check --model "${c%%:*}" --precision "${c#*:}"
done
for k in "${kernel_rows[@]}"; do
  model_run kernels "$k" 'print(sys.argv[2], "kernels alone, per step: PyTorch", round(d["framework_step_ms"], 2), "ms, plans", round(d["plan_step_ms"], 2), "ms; L2 flushed: PyTorch", round(d["l2_flushed"]["framework_step_ms"], 2), "ms, plans", round(d["l2_flushed"]["plan_step_ms"], 2), "ms; host to issue them: PyTorch", round(d["framework_step_host_ms"], 2), "ms, plans", round(d["plan_step_host_ms"], 2), "ms; worst relative error of a plan against PyTorch: first call", max([r["plan_first_call_rel_error"] or 0 for r in d["kernels"]]), "later", max([r["plan_rel_error"] or 0 for r in d["kernels"]]))' \
    --flush-l2 --model "${k%%:*}" --precision "${k#*:}"
done
if [ "${#memory_rows[@]}" -gt 0 ]; then
  left=$(time_left)
  timeout "$left" "$python" "$root/bench/step_memory.py" --server "$server_addr" \
    --out "$results" --runs-dir "$runs" --device "$device" "${memory_args[@]}" \
    --rows "${memory_rows[@]}" 2>&1 |
    tee -a "$results/stack.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [ -n "$warm_then_stop" ] && [ $# -gt 0 ]; then
  # The rows' plans from the worker for at most that long, then the worker stopped, so that no
  # measured job shares the GPU with its benchmarks (what is still missing runs PyTorch's own).
  log "warming $* for ${warm_then_stop} s at most, then stopping the worker"
  warm_rows warm "$((warm_then_stop + 15))" "$warm_then_stop" --warm-wait-s "$warm_then_stop" \
    --rows "$@" "${warm_args[@]}"
  stack_stop_worker
  # Nothing benchmarks now: a converted job's request held by the server only delays its start.
  suite_args+=(--server-wait-s 0)
  log "worker stopped; timings in the database: $("$bundle/lib/postgresql/15/bin/psql" -tA "$stack_db_url" -c 'SELECT count(*) FROM timings')"
fi
left=$(time_left)
if [ "$left" -gt 10 ] && [ $# -gt 0 ]; then
  # The suite starts no row whose jobs would not end within the budget (a row cut short is
  # device time spent on no ratio); an explicit --deadline-s, later on the line, wins.
  timeout "$left" "$python" "$root/bench/torch_models.py" suite --server "$server_addr" \
    --out "$results" --runs-dir "$runs" --device "$device" --deadline-s "$((left - 5))" \
    "${suite_args[@]}" --rows "$@" 2>&1 |
    tee "$results/torch_models.md"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
elif [ $# -gt 0 ]; then
  log "no time left for the suite (--budget-s $budget_s)"; rc=1
fi
left=$(time_left)
if [ "${#then_warm[@]}" -gt 0 ] && [ "$left" -gt 30 ]; then
  log "warming ${then_warm[*]} for ${left} s at most"
  warm_rows then_warm "$left" "$((left - 15))" --warm-wait-s "$left" --rows "${then_warm[@]}"
fi
stack_summary "$results/stack_summary.json"
stack_dump "$results/warm_db.sql.gz"
pack_runs
log "done: exit $rc"
exit "$rc"
