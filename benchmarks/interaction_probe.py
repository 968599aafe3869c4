"""Does a signal that needs two far-apart parts of each frame combined make the two attention
switches interact on the built-in model? A probe for a planted interaction (docs/factorial.md).

It writes the default synthetic set as a file dataset, in a temporary folder, with one planted
term added. Two markers go in the last channel of every frame: a_t over the top-left 3x3
pixels and b_t over the bottom-right 3x3, each uniform in [-1, 1] times ``--amp``, drawn
independently per sample and frame. No convolution reaches both corners (GroupNorm's statistics
and everything after the pool do see both). The target gets ``--beta`` times the mean over the
model's frames of a_t * b_t (``--kind product``), of |a_t - b_t| (``absdiff``) or, as a
control that needs no combining, of a_t + b_t (``sum``), centred. Then
it runs the 2x2 factorial over temporal_attention and spatial_attention through the runner,
and prints each cell's test MAE, and "kept": the slope of the test residuals on the planted
term over ``--beta``. For ``product``, 1 means the term is ignored and 0 that it is learned;
no part of it can be learned from one corner alone. For ``absdiff``, a part can
(E[|a - b| given a] = (1 + a^2) / 2: a tenth of the term's variance from each corner), so a
model that learned each corner alone but never combined them would keep about 0.8. Last, the
factorial effects with their verdicts.

    python benchmarks/interaction_probe.py [--kind product|absdiff|sum] [--beta 3] [--amp 2]
                                           [--seeds 2] [--epochs 4] [--set KEY=VALUE ...]
                                           [--address auto|HOST:PORT]

``--set`` passes config overrides to the runner as they are (default: none), e.g.
``max_train_examples=64`` for a quick check of the script itself. ``--address`` runs the
factorial on that running Ray instead of a local one it starts (docs/cluster.md); the data and
results are in a temporary folder of this machine, which every node must be able to read and
write (the runner first checks that each node sees the data).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import key_value, machine, markdown, run_cli  # noqa: E402
from ablations.model.config import DEFAULT_FRAMES  # noqa: E402
from ablations.model.synthetic import SyntheticSpec, make_synthetic  # noqa: E402
from ablations.results.stats.factorial import FactorialDesign, factorial_effects  # noqa: E402

MARKER_PX = 3
FACTORS = "temporal_attention,spatial_attention"


def planted_set(folder: Path, kind: str, beta: float, amp: float) -> None:
    """The default synthetic set with the corner markers and their planted term, written as
    ``images.npy`` and ``table.parquet`` (with its split, and the term as a stratum)."""
    data = make_synthetic(SyntheticSpec())
    images = data.images.copy()
    n, frames = images.shape[:2]
    rng = np.random.default_rng(1000)
    a = rng.uniform(-1.0, 1.0, size=(n, frames))
    b = rng.uniform(-1.0, 1.0, size=(n, frames))
    images[:, :, -1, :MARKER_PX, :MARKER_PX] += amp * a[:, :, None, None]
    images[:, :, -1, -MARKER_PX:, -MARKER_PX:] += amp * b[:, :, None, None]
    seen = slice(frames - DEFAULT_FRAMES, frames)  # the frames the model reads
    combined = {"product": a * b, "absdiff": np.abs(a - b), "sum": a + b}[kind]
    term = combined[:, seen].mean(axis=1)
    term -= term.mean()
    table = pd.DataFrame({"target": data.target + beta * term, "split": data.split,
                          "planted": term})
    for i, name in enumerate(data.scalar_names):
        table[name] = data.scalars[:, i]
    table["regime"] = data.strata["regime"].astype(str)
    np.save(folder / "images.npy", images)
    table.to_parquet(folder / "table.parquet", index=False)


def kept(predictions: pd.DataFrame, beta: float) -> pd.DataFrame:
    """Per trial: the slope of the test residuals on the planted term, over ``beta``."""
    rows = []
    for (cell, seed), group in predictions.groupby(["ablation", "seed"]):
        residual = group["target"] - group["pred_mean"]
        slope = np.polyfit(group["stratum_planted"].astype(float), residual, 1)[0]
        rows.append({"cell": cell, "seed": seed, "kept": slope / beta})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("product", "absdiff", "sum"), default="product")
    parser.add_argument("--beta", type=float, default=3.0, help="km per unit of the term")
    parser.add_argument("--amp", type=float, default=2.0, help="the markers' amplitude")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--set", dest="overrides", type=key_value, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="the runner's --set (repeatable; default: none)")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="a running Ray for the runner (default: it starts a local one)")
    args = parser.parse_args()
    if args.beta <= 0 or args.seeds < 2:
        parser.error("--beta must be > 0 and --seeds at least 2")
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        data, storage = Path(tmp) / "data", Path(tmp) / "results"
        data.mkdir()
        planted_set(data, args.kind, args.beta, args.amp)
        run = run_cli(["--design", "factorial", "--factors", FACTORS, "--seeds",
                       str(args.seeds), "--epochs", str(args.epochs), "--data", str(data),
                       "--no-dashboard", *(["--address", args.address] if args.address else []),
                       *(arg for key, value in args.overrides
                         for arg in ("--set", f"{key}={value}"))], storage=str(storage))
        predictions = pd.read_parquet(storage / "bench" / "predictions.parquet")
    trials = run["trials"]
    shares = kept(predictions, args.beta).groupby("cell")["kept"]
    mae = trials.groupby("ablation")["test_mae"]
    changed = "".join(f", {key}={value}" for key, value in args.overrides)
    print(f"{args.kind}, beta {args.beta} km, markers x{args.amp}, {args.seeds} seeds, "
          f"{args.epochs} epochs{changed}; {machine()}\n")
    print(markdown(["cell", "test MAE (km)", "kept (mean)", "kept (range)"], [
        [cell, f"{mae.mean()[cell]:.3f} ± {mae.std()[cell]:.3f}", f"{shares.mean()[cell]:.2f}",
         f"{shares.min()[cell]:.2f}-{shares.max()[cell]:.2f}"] for cell in mae.mean().index]))
    design = FactorialDesign.from_dict(run["metadata"]["factorial"])
    effects = factorial_effects(trials, design, metric="test_mae", margin="5%", alpha=0.05)
    print()
    print(markdown(["effect", "estimate (km)", "verdict"], [
        [row["effect"], f"{row['estimate']:+.3f}", row["verdict"]]
        for _, row in effects.iterrows()]))


if __name__ == "__main__":
    main()
