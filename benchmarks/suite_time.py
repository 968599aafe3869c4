"""Where the test suite's time goes: pytest run as the README's test command runs it, with
every test's duration, summed by kind of test; prints markdown tables.

    python benchmarks/suite_time.py                  # the whole suite: some 35 min on 2 slow cores

The kinds: the quoted benchmarks' whole runs (tests/test_reproduce_commands.py runs every
`python benchmarks/...` the docs quote, at a tiny size, as a process of its own), the other
tests marked slow (end to end: a Ray, subprocesses, servers, training runs; and the
simulations of many experiments), and the unit loop (``-m "not slow"``). The sums are
worker-seconds: each test's setup, call and teardown, added over the xdist workers, so on 2
workers they come to about twice pytest's wall. A count is of the tests pytest reported a
duration for, the skipped ones among them. The second table is the files with the most.

Also counted: the local Rays the run started. Every ``ray.init`` or command-line run without
an address writes a session folder under Ray's temporary folder, which the script points at
a folder of its own (``RAY_TMPDIR``); the clusters tests start with ``ray start --temp-dir``
are not among them.

``--pytest-args`` replaces the suite's selection (e.g. ``"-m 'not slow'"``); ``--log FILE``
reads the output of a ``pytest --durations=0 --durations-min=0`` run already made instead of
running one (its Ray starts are counted where the log ends with this script's ``local Ray
starts: N`` line, as ``--save`` writes it). ``--save FILE`` keeps the run's output with that
line and the ids of the tests marked slow at its commit (``marked slow: ID`` lines: a log
without them is read with this checkout's marks). ``--baseline FILE`` (such a log, of
another commit measured on the same machine) adds the before/after table: pytest's time,
the worker-seconds by kind, the tests and the Ray starts of both, each with its ratio, and the
25 slowest work units (a file, or one test of the files tests/conftest.py splits) with both
figures. A run whose pytest fails still prints its
tables, with pytest's exit code in the summary line, and exits with that code.

    python benchmarks/suite_time.py --save /tmp/after.log --baseline /tmp/before.log
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from common import REPO, machine, markdown

sys.path.insert(0, str(REPO))
from tests.conftest import work_unit  # noqa: E402  (the units the workers take)

QUOTED = "tests/test_reproduce_commands.py::test_a_quoted_benchmark_runs_and_prints_its_table"
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown) +(tests/\S.*)$", flags=re.M)
KINDS = ["the quoted benchmarks' whole runs", "other tests marked slow", "unit (not slow)"]
STARTS = re.compile(r"^local Ray starts: (\d+)$", flags=re.M)
MARKED = re.compile(r"^marked slow: (tests/\S.*)$", flags=re.M)
SUMMARY = re.compile(r"^=+ (.* in ([\d.]+)s\b.*?) =+$", flags=re.M)


def slow_tests() -> set[str]:
    """The ids of the tests marked slow, from pytest's collection."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         "-n", "0", "-m", "slow"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        last = (listed.stdout.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"pytest could not collect the tests marked slow (exit {listed.returncode}: "
                 f"{last}); run `pytest --collect-only -m slow` to see why")
    return {line for line in listed.stdout.splitlines() if line.startswith("tests/")}


def run_suite(args: list[str]) -> tuple[str, float, int, int]:
    """pytest with every duration shown: (its output, its wall seconds, the local Rays it
    started, its exit code)."""
    with tempfile.TemporaryDirectory(prefix="suite-ray-", dir="/tmp") as ray_dir:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=0",
             "--durations-min=0", *args], cwd=REPO, capture_output=True, text=True,
            env={**os.environ, "RAY_TMPDIR": ray_dir})
        wall = time.perf_counter() - start
        starts = sum(1 for path in Path(ray_dir).glob("ray/session_*")
                     if path.name != "session_latest")
    if done.returncode != 0:  # its failures, then the tables of what ran
        print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return done.stdout, wall, starts, done.returncode


def kind(test: str, slow: set[str]) -> str:
    if test.startswith(QUOTED):
        return KINDS[0]
    return KINDS[1] if test in slow else KINDS[2]


def shortened(test: str, width: int = 72) -> str:
    """A test's name without its file, in ``width`` characters: where it is cut, its
    parameters (``[...]``) keep the room they need, up to all but 24 characters, since they
    are what tells one case of a test from another."""
    name = test.split("::", 1)[-1]
    if len(name) <= width:
        return name
    base, bracket, params = name.partition("[")
    params = bracket + params
    if len(params) > width - 24:
        params = params[:width - 26] + "…]"
    return base[:width - len(params) - 1] + "…" + params


def seconds_per_test(output: str) -> Counter[str]:
    """Each test's setup, call and teardown seconds added, from pytest's durations."""
    per_test: Counter[str] = Counter()
    for seconds, _, test in DURATION.findall(output):
        per_test[test.strip()] += float(seconds)
    return per_test


def tables(output: str, slow: set[str]) -> tuple[str, str]:
    """The sums by kind and the ten files with the most worker-seconds."""
    per_test = seconds_per_test(output)
    by_kind: dict[str, list[float]] = defaultdict(list)
    slowest: dict[str, tuple[float, str]] = {}
    for test, seconds in per_test.items():
        name = kind(test, slow)
        by_kind[name].append(seconds)
        slowest[name] = max(slowest.get(name, (0.0, "")), (seconds, test))
    total = sum(per_test.values())
    rows = [[name, len(by_kind[name]), round(sum(by_kind[name]), 1),
             f"{100 * sum(by_kind[name]) / total:.0f}%",
             f"{shortened(slowest[name][1])} ({slowest[name][0]:.1f} s)"]
            for name in KINDS if by_kind[name]]
    rows.append(["all", len(per_test), round(total, 1), "100%", ""])
    per_file: Counter[str] = Counter()
    for test, seconds in per_test.items():
        per_file[test.split("::")[0]] += seconds
    files = [[path, round(seconds, 1), f"{100 * seconds / total:.0f}%"]
             for path, seconds in per_file.most_common(10)]
    return (markdown(["tests", "count", "worker-s", "share", "the slowest (its s)"], rows),
            markdown(["file", "worker-s", "share"], files))


def figures(output: str, slow: set[str]) -> dict[str, float | None]:
    """One run's figures for the before/after table: pytest's seconds, the tests, the
    worker-seconds of each kind and in all, the local Ray starts (None where not known)."""
    per_test = seconds_per_test(output)
    summary = SUMMARY.findall(output)
    starts = STARTS.findall(output)
    found: dict[str, float | None] = {
        "pytest's seconds": float(summary[-1][1]) if summary else None,
        "tests with a duration": float(len(per_test)),
        "worker-s in all": sum(per_test.values()),
    }
    for name in KINDS:
        found[f"worker-s: {name}"] = sum(s for test, s in per_test.items()
                                         if kind(test, slow) == name)
    found["local Ray starts"] = float(starts[-1]) if starts else None
    return found


def units(output: str) -> Counter[str]:
    seconds: Counter[str] = Counter()
    for test, s in seconds_per_test(output).items():
        seconds[work_unit(test)] += s
    return seconds


def ratio(before: float | None, after: float | None) -> str:
    return f"{after / before:.2f}" if before and after is not None else "-"


def marked_slow(output: str, here: set[str]) -> set[str]:
    """The tests a log names as marked slow (``--save`` writes them), else ``here``'s (this
    checkout's, for a plain pytest log)."""
    named = {test.strip() for test in MARKED.findall(output)}
    return named or here


def saved(output: str, starts: int | None, slow: set[str]) -> str:
    """A run's log as ``--save`` keeps it: pytest's output, its Ray starts, its slow tests."""
    return "\n".join([output, f"local Ray starts: {starts}",
                      *(f"marked slow: {test}" for test in sorted(slow)), ""])


def compared(before: str, after: str, slow: set[str], top: int = 25) -> tuple[str, str]:
    """The before/after table of two runs' outputs and the ``top`` slowest work units of the
    later run, each with both figures; each log's tests are of the kinds it names
    (``marked_slow``, ``slow`` where it names none)."""
    old = figures(before, marked_slow(before, slow))
    new = figures(after, marked_slow(after, slow))

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    rows = [[name, shown(old[name]), shown(new[name]), ratio(old[name], new[name])]
            for name in new]
    old_units, new_units = units(before), units(after)
    slowest = [[shortened(unit, 90) if "::" in unit else unit,
                shown(old_units.get(unit)), f"{seconds:.0f}", ratio(old_units.get(unit), seconds)]
               for unit, seconds in new_units.most_common(top)]
    return (markdown(["", "before", "after", "after/before"], rows),
            markdown([f"the {top} slowest work units", "before s", "after s", "after/before"],
                     slowest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pytest-args", default="",
                        help="pytest's arguments in place of the suite's selection")
    parser.add_argument("--log", type=Path, default=None,
                        help="a pytest --durations=0 output to read instead of running one")
    parser.add_argument("--save", type=Path, default=None,
                        help="write the run's output and its Ray starts here (a later "
                             "--baseline)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a log of another commit's run on this machine (--save's): "
                             "print the before/after table")
    args = parser.parse_args()
    for given in (args.log, args.baseline):
        if given is not None and not given.is_file():
            sys.exit(f"suite_time.py: {given} is not a file: give a log that --save wrote "
                     "or a pytest --durations=0 --durations-min=0 output")
    if args.log is not None:
        output, wall, code = args.log.read_text(errors="replace"), None, 0
        counted = STARTS.findall(output)
        starts = int(counted[-1]) if counted else None
    else:
        output, wall, starts, code = run_suite(shlex.split(args.pytest_args))
    here = slow_tests()
    if args.log is None:
        output = saved(output, starts, here)
        if args.save is not None:
            args.save.write_text(output)
    slow = marked_slow(output, here)
    by_kind, files = tables(output, slow)
    summary = SUMMARY.findall(output)
    print(by_kind, "", files, "", sep="\n")
    if args.baseline is not None:
        baseline = args.baseline.read_text(errors="replace")
        before_after, slowest = compared(baseline, output, here)
        print(f"Before: {args.baseline}; after: "
              f"{args.log if args.log is not None else 'this run'}", "", before_after, "",
              slowest, "", sep="\n")
    print(f"pytest: {summary[-1][0] if summary else 'no summary line'}"
          + (f"; {wall:.0f} s from launch to exit" if wall is not None else "")
          + (f"; exit code {code}" if code else ""))
    print(f"local Ray starts: {starts if starts is not None else 'not counted (--log)'}")
    print(machine())
    sys.exit(code)


if __name__ == "__main__":
    main()
