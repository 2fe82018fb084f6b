#!/usr/bin/env python3
"""docs/ stays prose a reader follows (issue 38): every file under docs/ is Markdown or SVG and at
most 100 KB, and every relative link in README.md, python/README.md and docs/*.md names a file or
folder that exists (and, with #anchor into a Markdown page, one of its headings as GitHub names
them). Run output belongs under bench/results/, beside the benchmark that wrote it.

    docs_test.py REPO         exit 0, or 1 listing every problem
    docs_test.py --self-test  the check is not vacuous: a tree with each mistake fails on each
"""

import os
import re
import sys
import tempfile

MAX_BYTES = 100 * 1024
PROSE = (".md", ".svg")
# [text](target) and ![alt](target); the target ends at whitespace or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def docs_problems(repo):
    problems = []
    for folder, _, files in os.walk(os.path.join(repo, "docs")):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, repo)
            if not name.endswith(PROSE):
                problems.append(f"{rel}: not prose (docs/ holds .md and .svg only; run output "
                                "goes to bench/results/)")
            size = os.path.getsize(path)
            if size > MAX_BYTES:
                problems.append(f"{rel}: {size} bytes, over {MAX_BYTES}")
    return problems


def anchors(markdown):
    """The #anchors of a Markdown page's headings, as GitHub makes them: lower case, punctuation
    dropped, spaces to hyphens, a repeated one suffixed -1, -2, ..."""
    with open(markdown, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    seen, result = {}, set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def link_problems(repo, markdown):
    """Relative links of one Markdown file (outside code) whose target does not exist."""
    with open(markdown, encoding="utf-8") as f:
        text = INLINE_CODE.sub("", FENCE.sub("", f.read()))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL (https:, mailto:, file:)
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(markdown), path)) if path \
            else markdown
        if not os.path.exists(resolved):
            problems.append(f"{os.path.relpath(markdown, repo)}: link to {target}: no such file")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            problems.append(f"{os.path.relpath(markdown, repo)}: link to {target}: no heading "
                            f"#{anchor} there")
    return problems


def self_test():
    """Each mistake the check is meant to catch, made in a scratch tree, is named."""
    with tempfile.TemporaryDirectory() as repo:
        os.makedirs(os.path.join(repo, "docs", "img"))
        files = {"README.md": "# Top: it\n[ok](docs/a.md) [gone](docs/gone.md) `[code](x)` "
                              "[web](https://x) [here](#top-it) [bad](docs/a.md#nowhere)",
                 "docs/a.md": "![pic](img/p.svg) [up](../README.md#top-it)\n```\n[fenced](nope)\n```",
                 "docs/img/p.svg": "<svg/>", "docs/run.json": "{}",
                 "docs/big.md": "x" * (MAX_BYTES + 1)}
        for name, text in files.items():
            with open(os.path.join(repo, name), "w") as f:
                f.write(text)
        problems = docs_problems(repo) + link_problems(repo, os.path.join(repo, "README.md")) \
            + link_problems(repo, os.path.join(repo, "docs", "a.md"))
    expected = ["docs/big.md: 102401 bytes, over 102400",
                "docs/run.json: not prose", "README.md: link to docs/gone.md: no such file",
                "README.md: link to docs/a.md#nowhere: no heading #nowhere there"]
    missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
    if missing or len(problems) != len(expected):
        print(f"self-test failed: expected {expected}, got {problems}")
        return 1
    print(f"self-test: the {len(expected)} mistakes found, nothing else")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2 or not os.path.isdir(os.path.join(argv[1], "docs")):
        print("usage: docs_test.py REPO (the source tree, with docs/)", file=sys.stderr)
        return 2
    repo = argv[1]
    pages = [os.path.join(repo, "README.md"), os.path.join(repo, "python", "README.md")]
    pages += sorted(os.path.join(repo, "docs", n) for n in os.listdir(os.path.join(repo, "docs"))
                    if n.endswith(".md"))
    problems = docs_problems(repo)
    for page in pages:
        if os.path.exists(page):
            problems += link_problems(repo, page)
    for problem in problems:
        print(problem)
    print(f"docs: {len(pages)} pages checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
