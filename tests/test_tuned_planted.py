"""A tuned ablation on real training finds a planted arm whose best learning rate is not the
baseline's.

The arm `fast_lr` trains at 32 times the learning rate it is given (``lr_scaling=linear`` with
``lr_reference_batch=1`` at batch 32). At the given configuration (lr 0.002, so 0.064 for the
arm) it trains badly. Both arms' searches start from the same seeded draws of lr (log-uniform in
3e-4..1e-2: 0.00297, 0.000449, 0.0084, 0.00163, then TPE once trials have ended); every draw but
the lowest puts the arm at 0.05 or more. So the arm must choose a learning rate at least 2 times
lower than the baseline's, the baseline must not choose the lowest it tried, and at its own lr
the arm must do better than at the given one and trail the baseline by less. The arm cannot
close the gap: the range's floor (3e-4, so 0.0096 for the arm) is above the baseline's best. A
small model on a small synthetic set keeps the run near 50 seconds on 2 cores; its seed-to-seed
spread is too wide for verdicts at 3 seeds, so the test reads the chosen learning rates and the
means.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from tests.conftest import run_here

SEEDS = 3
FACTOR = 32  # the arm's learning rate over the one it is given
SPACE = f"""\
name: planted_lr
description: an arm that trains at {FACTOR}x the learning rate it is given
reference: baseline
variants:
  baseline: {{}}
  fast_lr: {{lr_scaling: linear, lr_reference_batch: {32 // FACTOR}}}
"""
ARGS = ["--seeds", str(SEEDS), "--epochs", "6", "--seed-sources", "init,order",
        "--set", "synthetic_train=640", "--set", "synthetic_val=128",
        "--set", "synthetic_test=256", "--set", "cnn_widths=8,16,32", "--set", "embed_dim=16",
        "--set", "num_heads=2", "--set", "batch_size=32", "--no-dashboard",
        "--tune-each", "lr", "--tune-budget", "4"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted_lr")
    space = tmp / "planted_lr.yaml"
    space.write_text(SPACE)
    run = run_here("--space", str(space), *ARGS, "--name", "planted",
                   "--storage", str(tmp / "results"), cwd=tmp)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    root = tmp / "results" / "planted"
    return {"trials": pd.read_parquet(root / "trials.parquet"), "out": run.stdout,
            "meta": json.loads((root / "experiment.json").read_text())}


@pytest.mark.slow
def test_the_search_gives_the_planted_arm_a_lower_learning_rate_than_the_baseline(planted):
    from ablations.results.stats.tuned import side_by_side

    trials, record = planted["trials"], planted["meta"]["tuned"]
    tuning = trials[trials["phase"] == "tuning"]
    best = {arm: tuning.set_index("trial_name").loc[record["best_trials"][arm], "lr"]
            for arm in ("baseline", "fast_lr")}
    tried = tuning.groupby("ablation")["lr"]
    assert best["baseline"] > tried.min()["baseline"], tuning[["trial_name", "lr", "val_mae"]]
    assert best["fast_lr"] * 2 <= best["baseline"], best
    own = trials[trials["phase"] == "tuned"]
    for arm, lr in best.items():
        assert (own.loc[own["ablation"] == arm, "lr"] == lr).all()
    # the console's side-by-side table: each arm's means and its own best lr
    table = side_by_side(trials, keys=["lr"]).set_index("ablation")
    for arm, lr in best.items():
        row = table.loc[arm]
        assert re.search(rf"^\s+{arm}\s+{row['mean_given']:.3f} .* {row['mean_tuned']:.3f} .*"
                         rf" {lr:.3g}\s", planted["out"], re.MULTILINE), planted["out"][-3000:]


@pytest.mark.slow
def test_at_its_own_learning_rate_the_planted_arm_recovers_and_its_gap_narrows(planted):
    trials = planted["trials"]
    means = trials[trials["phase"] != "tuning"].groupby(["phase", "ablation"])["test_mae"].mean()
    gap_given = means["evaluation", "fast_lr"] - means["evaluation", "baseline"]
    gap_own = means["tuned", "fast_lr"] - means["tuned", "baseline"]
    # measured at 3 seeds (2 cores): the arm 1.170 km at the given lr, 0.865 km at its own;
    # gaps 0.258 km given, 0.124 km at each arm's own best
    assert gap_given > 0.1, means  # mistuned: clearly worse at the given lr
    assert means["tuned", "fast_lr"] < means["evaluation", "fast_lr"] - 0.1, means
    assert gap_own < gap_given, means
