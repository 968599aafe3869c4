"""How long the command line takes to answer without running anything: ``--help``, a
subcommand's help, a bad flag's one-line error, ``list`` and the main job's dry run (every
trial planned and checked), each in a fresh process, beside importing the run command's modules
(what every call loaded when the parser lived with them).

    python benchmarks/cli_start.py --repeats 7

Prints a markdown table: per command, the median, min and max wall seconds of the process
over the repeats, and which of torch, pandas, scipy, ray and matplotlib it loaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import machine, markdown

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "scipy", "ray", "matplotlib")
# Runs the command line in-process and reports the heavy modules it loaded, on stderr's last
# line (the command's own output goes where it goes).
PROBE = """
import json, runpy, sys
sys.argv = ["run_ablations.py", *sys.argv[1:]]
try:
    runpy.run_path("run_ablations.py", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr)
""" % (HEAVY,)
COMMANDS = {
    "--help": ["--help"],
    "run --help": ["run", "--help"],
    "a bad flag (--alpha 2)": ["--alpha", "2"],
    "list": ["list"],
    "a dry run (--space components --dry-run)": ["--space", "components", "--dry-run"],
}
RUN_MODULES = ("import sys, json, ablations.cli.run; print(json.dumps(sorted(m for m in %r if m "
               "in sys.modules)), file=sys.stderr)" % (HEAVY,))


def timed(argv: list[str]) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cases = {name: ["-c", PROBE, *argv] for name, argv in COMMANDS.items()}
    cases["import the run command's modules"] = ["-c", RUN_MODULES]
    times: dict[str, list[float]] = {name: [] for name in cases}
    loaded: dict[str, list[str]] = {}
    for _ in range(args.repeats):  # the cases alternate, so drift hits each alike
        for name, argv in cases.items():
            seconds, modules = timed(argv)
            times[name].append(seconds)
            loaded[name] = modules
    rows = [[name, statistics.median(ts), min(ts), max(ts), ", ".join(loaded[name]) or "none"]
            for name, ts in times.items()]
    print(machine())
    print(markdown(["command", "median s", "min s", "max s", "heavy modules loaded"], rows))


if __name__ == "__main__":
    main()
