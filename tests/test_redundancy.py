"""Two components that stand in for each other (examples/digits/redundant.py): removing either
alone changes accuracy by less than the margin, removing both drops it to chance, and the
factorial design's two-factor interaction says so, while a one-at-a-time table cannot. The
cells run without Ray (run_trial), on a small configuration, and are analysed as a run's
trials.parquet would be."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from ablations.experiment.core.design_options import Factorial
from ablations.experiment.prepare import prepare
from ablations.experiment.core.request import Request
from ablations.trial.run import run_trial
from ablations.results.io.directions import metric_of
from ablations.results.stats.factorial import factorial_effects

pytestmark = pytest.mark.slow  # 12 real (tiny) trainings, a few seconds


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    prepared = prepare(Request(space="examples/digits/redundancy.yaml", seeds=[0, 1, 2],
                               design=Factorial(factors=["branch_a", "branch_b"]),
                               overrides=[("epochs", 6)]))
    rows = []
    for spec in prepared.trials:
        result = run_trial(spec.config, name=spec.name, send=lambda *a: None,
                           store=lambda s: None, saved=None,
                           folder=tmp_path_factory.mktemp(spec.name),
                           device=torch.device("cpu"), resources={"CPU": 1})
        rows.append({"ablation": spec.variant, "seed": spec.seed, "status": result["status"],
                     "test_acc": result["test_acc"]})
    return prepared, pd.DataFrame(rows)


def test_either_branch_alone_does_the_job_and_neither_is_chance(cells):
    _, trials = cells
    means = trials.groupby("ablation")["test_acc"].mean()
    assert (trials["status"] == "ok").all()
    for alone in ("no_branch_a", "no_branch_b"):
        assert abs(means[alone] - means["baseline"]) < 0.05 * means["baseline"]
    assert means["no_branch_a-no_branch_b"] < 0.2  # a bias alone: about chance (0.1)


def test_the_factorial_design_finds_the_interaction(cells):
    prepared, trials = cells
    declared = prepared.base.own_code.metrics  # the example's test_acc: higher
    effects = factorial_effects(trials, prepared.design.factorial,
                                metric=metric_of("test_acc", declared), margin="5%",
                                alpha=0.05).set_index("effect")
    assert effects.loc["A:B", "verdict"] == "worse"
    assert effects.loc["A:B", "estimate"] < -0.5  # far more than the two removals' sum
