"""Where `make test`'s time goes: each pass's JUnit report (build/test-times/*.xml, written by `make
test`) summed per test file and per xdist group, and its longest tests, for docs/testing.md's table.

    .venv/bin/python tools/test_times.py [--top 25] [REPORT.xml ...]

A test's time is its call with its set-up and tear-down (pytest's JUnit `time`): a module fixture's
cost (a test cluster's) lands on the test that first asks for it."""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys

from junitparser import JUnitXml

DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "test-times", "*.xml")


def times(paths: list) -> dict:
    """(report name, test id) -> seconds, for every test case of the reports."""
    out = {}
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        for suite in JUnitXml.fromfile(path):
            for case in suite:
                out[(name, f"{case.classname.replace('.', '/')}.py::{case.name}")] = float(case.time or 0)
    return out


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", help=f"JUnit reports (default {DEFAULT})")
    parser.add_argument("--top", type=int, default=25, help="how many of the longest tests to list")
    args = parser.parse_args(argv)
    paths = args.reports or sorted(glob.glob(DEFAULT))
    if not paths:
        print(f"test_times: no report at {DEFAULT}: run `make test` first", file=sys.stderr)
        return 2
    found = times(paths)
    for report in sorted({name for name, _ in found}):
        mine = {test: s for (name, test), s in found.items() if name == report}
        per_file = collections.Counter()
        for test, s in mine.items():
            per_file[test.split("::")[0]] += s
        print(f"== {report}: {len(mine)} tests, {sum(mine.values()):.0f} s of test time (both workers together)")
        for path, s in per_file.most_common():
            print(f"{s:8.1f} s  {sum(t.startswith(path + '::') for t in mine):4d} tests  {path}")
        print(f"-- the {args.top} longest")
        for test, s in sorted(mine.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"{s:8.1f} s  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
