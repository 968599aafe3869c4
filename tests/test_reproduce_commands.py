"""Every simulation command the docs quote (`python -m tools.<module> N ...`) runs as quoted,
at a tiny size: each is found in the docs, run in this process with its experiment count
replaced, and must print its table. (The browser check is run by the report's tests.) So does
every benchmark command they quote (`python benchmarks/<script>.py ...`), as a subprocess with
its size flags replaced by tiny values (BENCHMARK_TINY); a quoted benchmark without a tiny
form fails. A benchmark whose claim is not about Ray's own start runs on the test worker's
shared Ray (ON_SHARED_RAY)."""

from __future__ import annotations

import json
import os
import re
import runpy
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import shared_ray

ROOT = Path(__file__).resolve().parents[1]
QUOTED = re.compile(r"python -m (tools\.\w+)((?: [\w.]+)*)")
SKIPPED = {"tools.browser_check"}  # needs Chromium and a report: tests/test_report_readable.py
SLOW = {"tools.datasets_simulation",  # 20 s an experiment on 2 busy cores
        "tools.shared_simulation"}  # every noise cell, design and test: 4 s at 10 experiments
SIZE = {"tools.datasets_simulation": "2"}  # its experiments; every other command's: 10


def quoted_commands() -> list[tuple[str, tuple[str, ...]]]:
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for module, args in QUOTED.findall(page.read_text()):
            if module not in SKIPPED:
                found.add((module, tuple(args.split())))
    return sorted(found)


def tiny(module: str, args: tuple[str, ...]) -> list[str]:
    """The quoted arguments with every count replaced by a small one."""
    return [SIZE.get(module, "10") if arg.isdigit() else arg for arg in args]


COMMANDS = quoted_commands()


def test_the_docs_quote_the_simulations():
    modules = {module for module, _ in COMMANDS}
    assert {"tools.simulation", "tools.workflow_simulation", "tools.failure_simulation",
            "tools.crossed_simulation", "tools.datasets_simulation"} <= modules, modules


@pytest.mark.parametrize("module, args", [
    pytest.param(module, args, marks=[pytest.mark.slow] if module in SLOW else [],
                 id=" ".join([module, *args])) for module, args in COMMANDS])
def test_a_quoted_simulation_command_runs_and_prints_its_table(module, args, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(sys, "argv", [module, *tiny(module, args)])
    runpy.run_module(module, run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"^\|.*\|$", out, flags=re.M), out[-2000:]  # a Markdown table's row


# --------------------------------------------------------------- the benchmarks' commands
# Every `python benchmarks/<script>.py ...` the docs quote runs as a subprocess at a tiny size,
# exits 0 and prints its table. A command's arguments run to the end of its code span or line,
# or to a `#` comment; a command wrapped across two lines is read up to the line's end.
QUOTED_BENCHMARK = re.compile(r"python benchmarks/(\w+\.py)((?: +[^\s`|#]+)*)")

# A trial small enough to train in a fraction of a second (scale.py's own TINY settings).
TINY_TRIAL = ("--set", "synthetic_train=64", "--set", "synthetic_val=16",
              "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16",
              "--set", "embed_dim=16", "--set", "batch_size=16")
# switches.py at its smallest: two eager fp32 cells that run (checkpointing off and on), one
# step each on a batch of 2 x 2 frames of 16 x 16, and two tf32 cells, which the rules refuse
# on a CPU (listed as skipped).
TINY_SWITCHES = ("--size", "16", "--steps", "1", "--warmup", "1", "--batch", "2",
                 "--frames", "2", "--threads", "1", "--modes", "off", "--precisions", "fp32,tf32")
# Per script, its size flags and their tiny values: each replaces the flag's quoted value, or
# is added where the command does not quote it (a repeated flag, such as --set, is added as a
# whole); every other quoted argument (--digits, --ray, --cluster, --kill-worker 0.5, --seed 8,
# --kind product, --systems) is kept. "{tmp}" is the test's temporary folder.
BENCHMARK_TINY: dict[str, tuple[str, ...]] = {
    "boundaries.py": ("--paths", "4096"),
    "cli_start.py": ("--repeats", "1"),
    # --trials 2: the marginal trial from a run of 2 trials against the one-trial run (2 CLI
    # runs in all).
    "command_overhead.py": ("--repeats", "1", "--trials", "2", "--digits-epochs", "1"),
    # one run per case, of one seed (2 trials); the session's runs have filled the caches a
    # warm-up run fills
    "driver_cpu.py": ("--repeats", "1", "--warmups", "0", "--seeds", "1"),
    # 123 samples of 16 x 16; the model step and train() on frames of that size.
    "data.py": ("--gb", "0.002", "--size", "16", "--train-examples", "32", "--eval-examples", "16",
                "--model-steps", "1"),
    # One passing test file, one CUDA-only test (skipped without CUDA, so its reason is listed),
    # pytest in one process; switches.py tiny; with --systems, two cells of the systems space
    # (the reference is added to --only) on tiny trials.
    "gpu_check.py": ("--tests", "tests/test_benchmark_switches.py,tests/test_gpu_paths.py::"
                                "test_a_trial_does_not_inherit_the_previous_trials_cuda_cache",
                     "--pytest-args", "-n 0", "--bench-args", " ".join(TINY_SWITCHES),
                     "--systems-args", " ".join(("--only", "nockpt-off-bf16", "--no-dashboard",
                                                 *TINY_TRIAL))),
    # the four steps with the store (--no-reuse adds a flag to each: tests/test_trial_store.py),
    # a table of 3 variants at 2 seeds, rounds up to 3
    "iterate.py": ("--epochs", "1", "--seeds", "2", "--max-seeds", "3", "--modes", "reuse",
                   "--variants", "3", *TINY_TRIAL),
    "interaction_probe.py": ("--seeds", "2", "--epochs", "1", "--set", "max_train_examples=64",
                             "--set", "max_eval_examples=32", "--set", "cnn_widths=8,16,16",
                             "--set", "embed_dim=16", "--set", "batch_size=16"),
    # one run each way, of one seed (2 trials); the session's runs have filled the caches a
    # warm-up run fills
    "run_cpu.py": ("--repeats", "1", "--warmups", "0", "--seeds", "1"),
    "report_figures.py": ("--repeats", "1"),
    "overhead.py": ("--threads", "1", "--repeats", "1", "--epochs", "1", *TINY_TRIAL),
    "scale.py": ("--trials", "9"),  # one seed of the components space's 9 variants: the fewest
    "scaling.py": ("--k", "1", "--epochs", "1", *TINY_TRIAL),
    "seeds_auto.py": ("--experiments", "20"),
    "skew_tests.py": ("--experiments", "50"),
    # in place of the suite, in one process: a unit-test file and one slow test that starts
    # one local Ray (its module's) and runs the command line twice in it
    "suite_time.py": ("--pytest-args", "tests/test_config.py tests/test_provenance.py::"
                      "test_allow_changed_resumes_and_records_what_changed -n 0"),
    "switches.py": (*TINY_SWITCHES, "--json", "{tmp}/switches.json"),
}
# What a script's output must show beyond a Markdown row, where a part of it catches its own
# failure and goes on (script, a quoted flag that adds the part or None, a pattern in stdout).
MUST_SHOW = [
    ("command_overhead.py", "--digits", r"^\| examples/digits/train\.py"),
    ("command_overhead.py", "--ray", r"^\| trivial through one more trial of a CLI run"),
    ("gpu_check.py", None, r"^\| tests/test_benchmark_switches\.py \| 1 \| 0 \| 0 \|"),
    ("gpu_check.py", None, r"^\| off \| off \| fp32 \| \d"),  # the switches table, a measured row
    ("gpu_check.py", "--systems", r"^2 ok, 0 failed"),
    ("scale.py", "--kill-worker", r"^\| \d+ \| runner CLI, worker node killed"),
    ("driver_cpu.py", None, r"^\| with Tune's callback tag \| 1 \| \d"),
    ("iterate.py", None, r"^\| \+ one variant \| reuse \| (\d+) \| 2 \| "),  # the new arm only
    ("switches.py", None, r"^\| on \| off \| fp32 \| \d"),
    ("suite_time.py", None, r"^\| unit \(not slow\) \| [1-9]\d* \| \d"),  # a measured row
    ("suite_time.py", None, r"^\| other tests marked slow \| 1 \| \d"),
    ("suite_time.py", None, r"^local Ray starts: 1$"),
]
MUST_NOT_SHOW = ["| error:", "skipped the CLI run"]  # a switches cell failed; the CLI part did

# The scripts whose claim is not about Ray's own start (nor the command line's): each takes
# `--address`, which goes to every command and Ray it starts, and runs on the test worker's
# shared Ray (tests/conftest.py) rather than starting Rays of its own, a CLI command's ~7 CPU-s
# each. Per script, a quoted flag that starts a cluster of its own (scale.py's --cluster: two
# `ray start` nodes, the claim its case tests) and keeps the script off the shared Ray, or None.
# cli_start.py, command_overhead.py (--ray), run_cpu.py and overhead.py (its start s, and
# Ray's start alone) measure the start itself and start their own; driver_cpu.py's claim is the
# difference between its cases, which holds on any Ray.
ON_SHARED_RAY: dict[str, str | None] = {
    "iterate.py": None, "scale.py": "--cluster", "scaling.py": None, "driver_cpu.py": None,
    "interaction_probe.py": None, "gpu_check.py": None,  # gpu_check.py: its --systems run
}


def quoted_benchmarks() -> list[tuple[str, tuple[str, ...]]]:
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for script, args in QUOTED_BENCHMARK.findall(page.read_text()):
            found.add((script, tuple(args.split())))
    return sorted(found)


def tiny_benchmark(script: str, args: tuple[str, ...]) -> list[str] | None:
    """The quoted arguments with each size flag's value replaced by its tiny one (None: the
    script has no tiny form)."""
    if script not in BENCHMARK_TINY:
        return None
    sizes = BENCHMARK_TINY[script]
    flags = set(sizes[::2])
    kept, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg in flags:
            rest.pop(0)  # its quoted value
        else:
            kept.append(arg)
    # FLAG=VALUE, one argument: a value that starts with "-" (e.g. "-n 0") stays the flag's.
    return kept + [f"{flag}={value}" for flag, value in zip(sizes[::2], sizes[1::2])]


BENCHMARKS = quoted_benchmarks()


# Flags that only add a part to what a script runs (its usage says "also ..."): a quoted command
# whose tiny form is another's less some of these runs within that other's case.
ADDS_A_PART = {"gpu_check.py": {"--systems"}, "command_overhead.py": {"--digits", "--ray"}}


def runs_within(script: str, args: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether ``other`` runs all that ``args`` runs: the same tiny arguments plus flags that
    add a part."""
    missing, added = Counter(args) - Counter(other), Counter(other) - Counter(args)
    return not missing and bool(added) and set(added) <= ADDS_A_PART.get(script, set())


def benchmark_cases() -> list:
    """One case per distinct tiny command line, named by the quoted commands it stands for (a
    command that runs within another's, as ADDS_A_PART says, is named by that case)."""
    cases: dict[tuple, list[str]] = {}
    for script, args in BENCHMARKS:
        tiny_args = tiny_benchmark(script, args)
        # A command without a tiny form is a case of its own (args None), which fails.
        key = (script, None, args) if tiny_args is None else (script, tuple(tiny_args), ())
        cases.setdefault(key, []).append(" ".join([f"benchmarks/{script}", *args]))
    for key in [key for key in cases if key[1] is not None]:
        script, tiny_args, _ = key
        outer = next((other for other in cases if other[0] == script and other[1] is not None
                      and runs_within(script, tiny_args, other[1])), None)
        if outer is not None:
            cases[outer] = cases.pop(key) + cases[outer]
    return [pytest.param(script, tiny_args, marks=pytest.mark.slow, id=" + ".join(quoted))
            for (script, tiny_args, _), quoted in cases.items()]


def test_the_docs_quote_the_benchmarks():
    scripts = {script for script, _ in BENCHMARKS}
    assert {"cli_start.py", "command_overhead.py", "scale.py", "overhead.py", "scaling.py",
            "data.py", "switches.py", "gpu_check.py", "seeds_auto.py", "interaction_probe.py",
            "boundaries.py", "skew_tests.py"} <= scripts, scripts


def test_every_quoted_benchmark_has_a_tiny_form():
    missing = sorted({script for script, args in BENCHMARKS
                      if tiny_benchmark(script, args) is None})
    assert not missing, f"no tiny form in BENCHMARK_TINY for the quoted {missing}"
    for script, _ in BENCHMARKS:
        assert (ROOT / "benchmarks" / script).is_file(), script


def test_each_quoted_benchmark_is_run_by_one_case_that_runs_all_of_it():
    named = [quoted for case in benchmark_cases() for quoted in case.id.split(" + ")]
    assert sorted(named) == sorted(" ".join([f"benchmarks/{script}", *args])
                                   for script, args in BENCHMARKS)
    assert runs_within("gpu_check.py", ("--tests=x",), ("--systems", "--tests=x"))
    assert not runs_within("gpu_check.py", ("--tests=x",), ("--tests=x",))  # the same
    assert not runs_within("gpu_check.py", ("--tests=x",), ("--tests=y", "--systems"))
    assert not runs_within("scale.py", ("--trials=9",), ("--cluster", "--trials=9"))
    case = next(case for case in benchmark_cases() if "gpu_check.py --systems" in case.id)
    assert "--systems" in case.values[1], case  # the case runs the command with the part


@pytest.mark.parametrize("script, args", benchmark_cases())
def test_a_quoted_benchmark_runs_and_prints_its_table(script, args, tmp_path):
    if args is None:
        pytest.fail(f"benchmarks/{script} has no tiny form in BENCHMARK_TINY")
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if script in ON_SHARED_RAY and ON_SHARED_RAY[script] not in argv:
        # Its commands connect with the token the shared Ray's start set up (RAY_AUTH_MODE in
        # this process's environment, which the subprocess inherits; ~/.ray/auth_token).
        argv += ["--address", shared_ray().get_runtime_context().gcs_address]
    command = [sys.executable, f"benchmarks/{script}", *argv]
    # A session of its own: on a timeout the script and what it started are stopped together.
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=900)  # the suite also runs on 4x slower machines
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{' '.join(command)} ran past 900 s:\n{out[-2000:]}\n{err[-3000:]}")
    shown = f"{' '.join(command)} exited {process.returncode}:\n{out[-3000:]}\n{err[-3000:]}"
    assert process.returncode == 0, shown
    assert re.search(r"^\|.*\|$", out, flags=re.M), shown  # a Markdown table's row
    for name, flag, pattern in MUST_SHOW:
        if name == script and (flag is None or flag in argv):
            assert re.search(pattern, out, flags=re.M), f"no {pattern!r} in\n{shown}"
    for text in MUST_NOT_SHOW:
        assert text not in out + err, shown
    if script == "switches.py":  # its --json file, in the test's folder
        assert json.loads((tmp_path / "switches.json").read_text())["rows"], shown
