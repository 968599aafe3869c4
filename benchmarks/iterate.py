"""What iterating on an ablation costs with the trial store and without it: four steps a
researcher takes, each a command of its own (Ray started each time, unless ``--address``),
run once under one storage as they come (finished trials reused) and once with
``--no-reuse``:

1. the main job's table without its last variant (``--space components --only ...``);
2. the whole table: one variant more (``--variants K``: the table is the space's first K
   variants, all 9 by default);
3. the ``features`` space, which shares the baseline's configuration and seeds;
4. the table of step 2 continued with ``--seeds auto`` (``--resume``): the undecided arms'
   new seeds.

For each step and mode: the trials planned, trained and reused, and the command's wall time.

    python benchmarks/iterate.py [--epochs 4] [--seeds 3] [--max-seeds 10] [--set KEY=VALUE]
                                 [--modes reuse,no-reuse] [--variants 9]
                                 [--address auto|HOST:PORT]

The defaults are the main job's (``--space components``, 3 seeds, 4 epochs); ``--epochs 1``
and ``--set synthetic_train=256`` shorten every trial alike. ``--address`` goes to every
command: each connects to that running Ray instead of starting one (docs/cluster.md; the
storage is a temporary folder of this machine, so every node must be able to write it: a Ray
on this machine, or ``TMPDIR`` on a shared file system), and a step's wall leaves Ray's start
out; what is planned, trained and reused is the same either way.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, _env, key_value, machine, markdown  # noqa: E402

COMPONENTS = ["baseline", "no_temporal_attention", "no_spatial_attention", "no_attention",
              "no_scalars", "no_images", "single_frame", "reduced_width", "point_estimate"]


def steps(seeds: int, max_seeds: int = 10, variants: int = len(COMPONENTS)
          ) -> list[tuple[str, str, list[str]]]:
    """(step, experiment name, the command's arguments) in order. The fixed steps plan the
    rounds a continuation runs (``--max-seeds``), as a fixed run records them; the table is
    the components space's first ``variants`` variants."""
    fixed = ["--seeds", str(seeds), "--max-seeds", str(max_seeds)]
    table = COMPONENTS[:variants]
    only = [] if variants == len(COMPONENTS) else ["--only", ",".join(table)]
    return [
        ("main table less one variant", "main",
         ["--space", "components", *fixed, "--only", ",".join(table[:-1])]),
        ("+ one variant", "plus", ["--space", "components", *fixed, *only]),
        ("features space", "features", ["--space", "features", *fixed]),
        ("--seeds auto continuation", "plus", ["--resume", "--seeds", "auto"]),
    ]


def run_step(args: list[str], storage: str, name: str, extra: list[str]) -> tuple[float, int]:
    """Run one step's command; (its wall seconds, the rows trials.parquet had before it)."""
    folder = Path(storage) / name
    before = len(pd.read_parquet(folder / "trials.parquet")) \
        if (folder / "trials.parquet").is_file() else 0
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "run_ablations.py", *args, *extra, "--storage",
                           storage, "--name", name, "--quiet"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return wall, before


def measure(reuse: bool, seeds: int, max_seeds: int, variants: int, extra: list[str],
            where: list[str]) -> list[dict]:
    """One mode's four steps under a storage of their own; ``where``: the arguments every
    command takes (``--address``), a continuation's included."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-iterate-") as storage:
        for step, name, args in steps(seeds, max_seeds, variants):
            wall, before = run_step(args + ([] if reuse else ["--no-reuse"]), storage, name,
                                    where + ([] if "--resume" in args else extra))
            trials = pd.read_parquet(Path(storage) / name / "trials.parquet").iloc[before:]
            reused = int((trials["reused_from"].fillna("") != "").sum())
            rows.append({"step": step, "mode": "reuse" if reuse else "--no-reuse",
                         "planned": len(trials), "trained": len(trials) - reused,
                         "reused": reused, "wall_s": wall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4, help="epochs per trial (default 4)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the fixed steps")
    parser.add_argument("--max-seeds", type=int, default=10,
                        help="the seeds a continuation may reach (default 10)")
    parser.add_argument("--set", dest="overrides", type=key_value, action="append",
                        default=[], metavar="KEY=VALUE", help="a config key for every trial")
    parser.add_argument("--variants", type=int, default=len(COMPONENTS),
                        help="the table: the components space's first K variants, 2 to 9 "
                             "(default 9)")
    parser.add_argument("--modes", default="reuse,no-reuse",
                        help="the modes to run, of reuse,no-reuse (default both)")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="a running Ray for every command (default: each starts a local "
                             "one)")
    args = parser.parse_args()
    modes = list(dict.fromkeys(mode.strip() for mode in args.modes.split(",")))
    if not modes or set(modes) - {"reuse", "no-reuse"}:
        parser.error(f"--modes {args.modes!r}: give reuse, no-reuse or both")
    if not 2 <= args.variants <= len(COMPONENTS):
        parser.error(f"--variants {args.variants}: give 2 to {len(COMPONENTS)}")
    extra = ["--epochs", str(args.epochs)]
    for key, value in args.overrides:
        extra += ["--set", f"{key}={value}"]
    where = ["--address", args.address] if args.address else []
    rows = [row for mode in modes
            for row in measure(mode == "reuse", args.seeds, args.max_seeds, args.variants,
                               extra, where)]
    order = [step for step, _, _ in steps(args.seeds)]
    rows.sort(key=lambda row: order.index(row["step"]))  # each step's two modes together
    print(markdown(["step", "mode", "trials planned", "trained", "reused", "wall (s)"],
                   [[r["step"], r["mode"], r["planned"], r["trained"], r["reused"], r["wall_s"]]
                    for r in rows]))
    print(f"\n{machine()}")


if __name__ == "__main__":
    main()
