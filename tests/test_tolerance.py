"""A tolerance for divergence (``max_failure_rate``) reaches every place a verdict is read: the
fixed design and --seeds auto alike (an outlying seed included), the continuation's hint and
its plan, the verdicts across datasets, the tuned side-by-side table, the paper's caption; and
planning refuses in the words of the design that was asked for."""

from __future__ import annotations

import pandas as pd
import pytest

from ablations.experiment.core.design_options import Factorial, Tuned
from ablations.config.comparison import Decision
from ablations.experiment.core.request import Request, UsageError
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.verdicts import verdict_table
from tests.test_failures import EQUAL_ARMS, trials_table

HELD = "failure rate ≤63% not below the tolerance 30%: no equivalence claim"


def test_an_outlier_over_the_tolerance_reads_alike_in_the_fixed_design_and_the_rounds():
    trials = trials_table(10, {**EQUAL_ARMS, "close": (1.02, set())}, sd=0.0005)
    odd = (trials["ablation"] == "close") & (trials["seed"] == 1)
    trials.loc[odd, "test_mae"] *= 1.03
    design = SeedDesign.plan(3, 10)
    for tolerance in (None, 0.2):  # 0 of 10 bounds the rate at 26%: over 20% at every look
        fixed = verdict_table(trials, max_failure_rate=tolerance).set_index("ablation")
        auto = sequential_verdict_table(trials, design, list(range(10)),
                                        max_failure_rate=tolerance).set_index("ablation")
        assert bool(fixed.loc["close", "outlier"]) and bool(auto.loc["close", "outlier"])
        assert fixed.loc["close", "verdict"] == auto.loc["close", "verdict"], tolerance
        # the outlier bars the size; a bound over the tolerance bars `equivalent` itself
        assert fixed.loc["close", "verdict"] == ("significant" if tolerance is None
                                                 else "worse")


def test_the_continuation_hint_reads_the_verdicts_with_the_runs_tolerance():
    from ablations.experiment.continuing import continuation_hint

    trials = trials_table(3, EQUAL_ARMS, sd=0.001).assign(
        wall_s=10.0, cpu_hours=0.001, gpu_hours=0.0)
    held = verdict_table(trials, max_failure_rate=0.3)
    assert set(held["verdict"]) == {"reference", "inconclusive"}
    hint = continuation_hint(trials, held, storage="/s", name="exp", decision=Decision(
                                 reference="baseline", metric="test_mae", margin="5%",
                                 alpha=0.05))
    assert "--seeds auto" in hint and "would not decide" not in hint, hint


def test_a_continuation_keeps_the_recorded_tolerance_and_refuses_another(tmp_path):
    from ablations.experiment.continuing import check_planned

    planned = {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05,
               "max_failure_rate": 0.3}
    design = SeedDesign.plan(3, 10)
    check_planned(Request(seeds="auto", given=frozenset({"seeds"})), "exp", planned, design)
    other = Request(seeds="auto", max_failure_rate=0.5,
                    given=frozenset({"seeds", "max_failure_rate"}))
    with pytest.raises(UsageError, match="max_failure_rate 0.5: exp planned its rounds before "
                                         "its first trial with max_failure_rate 0.3"):
        check_planned(other, "exp", planned, design)
    with pytest.raises(UsageError, match="with max_failure_rate none"):
        check_planned(other, "exp", {**planned, "max_failure_rate": None}, design)


def test_across_datasets_an_arm_over_the_tolerance_on_one_is_not_equivalent():
    from ablations.results.stats.datasets import across_datasets

    one = trials_table(3, EQUAL_ARMS, sd=0.001, seed=1).assign(dataset="a")
    two = trials_table(3, EQUAL_ARMS, sd=0.001, seed=2).assign(dataset="b")
    trials = pd.concat([one, two], ignore_index=True)
    settings = {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05}
    free = across_datasets(trials, {"a": verdict_table(one), "b": verdict_table(two)},
                           **settings).set_index("ablation")
    held = across_datasets(trials, {"a": verdict_table(one, max_failure_rate=0.3),
                                    "b": verdict_table(two, max_failure_rate=0.3)},
                           **settings).set_index("ablation")
    assert free["equivalent"].any()  # without it, some arm is equivalent across the two
    assert not held["equivalent"].any()
    assert held.loc["same0", "reason"].startswith("failure rate not bounded below the "
                                                  "tolerance 30% on a, b")


def test_the_tuned_table_and_the_paper_caption_carry_the_tolerance():
    from ablations.results.report.paper import undecided_caption
    from ablations.results.stats.tuned import side_by_side

    given = trials_table(3, EQUAL_ARMS, sd=0.001).assign(phase="evaluation")
    both = pd.concat([given, given.assign(phase="tuned", lr=0.1)], ignore_index=True)
    table = side_by_side(both, keys=["lr"], max_failure_rate=0.3)
    assert set(table["verdict_given"]) == {"reference", "inconclusive"}
    held = verdict_table(given, max_failure_rate=0.3)
    caption = undecided_caption(held.set_index("ablation"), held.attrs)
    assert "no margin for 6 (an outlying seed, more diverged " \
           "seeds than the reference, or a failure-rate bound not below the tolerance 30%)" \
           in caption, caption
    assert (held.set_index("ablation").loc[list(EQUAL_ARMS), "reason"] == HELD).all()


def test_planning_refuses_in_the_words_of_the_design_asked_for():
    from ablations.experiment.prepare import prepare

    with pytest.raises(UsageError, match="does not combine with a search space"):
        prepare(Request(space="hpo", design=Tuned(each=["lr"])))
    with pytest.raises(UsageError, match="design factorial: space hpo is a search"):
        prepare(Request(space="hpo", design=Factorial(factors=["a", "b"]), seeds=[0, 1]))
    # a search has no `equivalent` to withhold: no tolerance refusal there
    searched = prepare(Request(space="hpo", max_failure_rate=0.2)).design
    assert searched.plan_spec["decision"].max_failure_rate == 0.2
    with pytest.raises(UsageError, match=r"give 14 seeds or more \(seeds 14\)"):
        prepare(Request(design=Factorial(factors=["temporal_attention", "spatial_attention"]),
                        seeds=[0, 1],
                        max_failure_rate=0.2))


def test_one_baseline_check_refuses_trials_of_several_datasets():
    from ablations.results.stats.baseline_check import record_baseline_check

    trials = pd.concat([trials_table(3, EQUAL_ARMS).assign(dataset=name) for name in "ab"],
                       ignore_index=True)
    with pytest.raises(ValueError, match="several datasets: pass the experiment's analysis"):
        record_baseline_check(None, trials, None, reference="baseline")
