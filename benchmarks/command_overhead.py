"""The command contract's overhead: one program run by hand (``subprocess.run``) against the
same program run as a trial through ``run_trial`` (ablations/trial/command.py: its command
line filled, its metrics file polled, its reports sent), no Ray; prints a markdown table.

    python benchmarks/command_overhead.py --repeats 10 [--digits] [--ray]

The program: a ``python -c`` that writes three epoch lines and a final line to its metrics
file; with ``--digits`` also examples/digits/train.py (``--digits-epochs``, default 8). The two
paths alternate, so drift hits both; medians over the repeats, and the difference. With
``--ray``, the same trivial program as a one-trial experiment through the CLI
(``run_ablations.py run --space FILE --seeds 1``): the whole run, Ray's start included, and the
trial's own ``wall_s`` (from the start of the trial to its final result); and the wall time one
more trial adds to a CLI run (``--trials`` trials against one, one at a time: Tune's
scheduling, the worker and the results' collection included); skipped with a message where that
fails.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from common import REPO, machine, markdown, run_cli

sys.path.insert(0, str(REPO))
from ablations.config import TrialConfig  # noqa: E402
from ablations.config.code import command_from, command_spec  # noqa: E402
from ablations.trial.run import run_trial  # noqa: E402

TRIVIAL = ("import json, sys; handle = open(sys.argv[1], 'a'); "
           "[handle.write(json.dumps(dict(epoch=e, score=e / 3)) + chr(10)) for e in (1, 2, 3)]; "
           "handle.write(json.dumps(dict(score=1.0)) + chr(10))")
DIGITS_FLAGS = "--epochs {epochs} --seed {seed} --data-seed {data_seed}"


def programs(digits: bool, digits_epochs: int = 8) -> dict[str, tuple[str, list[str]]]:
    """name -> (the command line with fields, the line by hand with METRICS for the file)."""
    python = shlex.quote(sys.executable)
    table = {"trivial (python -c, 3 epochs)":
             (f"{python} -c {shlex.quote(TRIVIAL)} {{metrics_file}}",
              [sys.executable, "-c", TRIVIAL, "METRICS"])}
    if digits:
        train = str(REPO / "examples" / "digits" / "train.py")
        # {seed} and {data_seed} stay fields of the command line, filled per trial.
        flags = DIGITS_FLAGS.replace("{epochs}", str(digits_epochs))
        epochs = f"{digits_epochs} epoch" + ("s" if digits_epochs != 1 else "")
        table[f"examples/digits/train.py ({epochs})"] = (
            f"{python} {shlex.quote(train)} {flags} --metrics-file {{metrics_file}}",
            [sys.executable, train, *flags.format(seed=0, data_seed=0).split(),
             "--metrics-file", "METRICS"])
    return table


def by_hand(line: list[str], folder: Path) -> float:
    metrics = folder / "by-hand.jsonl"
    metrics.unlink(missing_ok=True)
    started = time.perf_counter()
    subprocess.run([str(metrics) if part == "METRICS" else part for part in line], cwd=REPO,
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def as_trial(config: TrialConfig, folder: Path) -> float:
    sent: list = []
    started = time.perf_counter()
    result = run_trial(config, name="baseline-seed0",
                       send=lambda metrics, final, predictions: sent.append(metrics),
                       store=lambda state: None, saved=None, folder=folder / "trial",
                       device=torch.device("cpu"), resources={"CPU": 1}, cwd=REPO)
    wall = time.perf_counter() - started
    if result["status"] != "ok" or len(sent) < 2:
        raise RuntimeError(f"the trial did not report: {result}")
    return wall


def trivial_space(folder: Path) -> Path:
    space = folder / "trivial.yaml"
    space.write_text(yaml.safe_dump({
        "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(TRIVIAL)} {{metrics_file}}",
        "config": {}, "metrics": {"score": "higher"}, "variants": {"baseline": {}}}))
    return space


def cli_wall(space: Path, seeds: int) -> dict:
    """One CLI run of ``seeds`` trials of the trivial program, one at a time: its whole wall
    (Ray's start included) and its trials."""
    out = run_cli(["run", "--space", str(space), "--seeds", str(seeds), "--max-seeds",
                   str(max(seeds, 2)), "--max-concurrent", "1", "--cpus-per-trial", "1"])
    if set(out["trials"]["status"]) != {"ok"}:
        raise RuntimeError(f"the CLI's trials ended {set(out['trials']['status'])}")
    return {"wall": out["ended_at"] - out["launched_at"], "trials": out["trials"]}


def through_ray(repeats: int, folder: Path, trials: int
                ) -> tuple[list[float], list[float], list[float]]:
    """Per repeat, the CLI's one-trial run (Ray's start included) and its trial's ``wall_s``;
    and, for every third repeat (at least one), the wall time one more trial adds to a CLI
    run: (a run of ``trials`` trials − that repeat's run of one) / (``trials`` − 1), Tune's
    scheduling, the worker's reuse and the results' collection included, Ray's start cancelled
    out. The two runs of a pair follow each other, so drift hits both."""
    space = trivial_space(folder)
    walls, trial_walls, marginals = [], [], []
    for repeat in range(repeats):
        one = cli_wall(space, 1)
        walls.append(one["wall"])
        trial_walls.append(float(one["trials"]["wall_s"].iloc[0]))
        if repeat < max(1, repeats // 3):
            marginals.append((cli_wall(space, trials)["wall"] - one["wall"]) / (trials - 1))
    return walls, trial_walls, marginals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--digits", action="store_true", help="also examples/digits/train.py")
    parser.add_argument("--digits-epochs", type=int, default=8,
                        help="with --digits: the epochs examples/digits/train.py trains")
    parser.add_argument("--ray", action="store_true", help="also a one-trial run of the CLI")
    parser.add_argument("--trials", type=int, default=21,
                        help="with --ray: the trials of the run whose marginal trial is timed")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="command-overhead-") as directory:
        folder = Path(directory)
        for name, (run, line) in programs(args.digits, args.digits_epochs).items():
            command = command_from(run, {}, {"score": "higher"} if "trivial" in name
                                   else {"test_acc": "higher"})
            config = TrialConfig.of(model=command_spec(command))
            as_trial(config, folder)  # warm-up: imports, the first fork
            hand, trial = [], []
            for _ in range(args.repeats):
                hand.append(by_hand(line, folder))
                trial.append(as_trial(config, folder))
            hand_s, trial_s = statistics.median(hand), statistics.median(trial)
            rows.append([name, hand_s, trial_s, trial_s - hand_s])
        if args.ray:
            try:
                walls, trial_walls, marginal = through_ray(args.repeats, folder, args.trials)
                for what, wall in (("the CLI's whole run, Ray's start included", walls),
                                   ("its trial's wall_s (trials.parquet)", trial_walls),
                                   (f"one more trial of a CLI run ({args.trials} trials "
                                    "against 1, one at a time)", marginal)):
                    wall_s = statistics.median(wall)
                    rows.append([f"trivial through {what}", rows[0][1], wall_s,
                                 wall_s - rows[0][1]])
            except (RuntimeError, OSError, KeyError) as exc:
                print(f"skipped the CLI run: {str(exc).strip().splitlines()[-1]}",
                      file=sys.stderr)
    print(f"{machine()}; medians of {args.repeats}\n")
    print(markdown(["program", "by hand s", "as a trial s", "overhead s"], rows))


if __name__ == "__main__":
    main()
