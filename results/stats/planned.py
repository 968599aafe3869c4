"""Settings fixed before the data: what experiment.json's ``planned`` records at plan time.

Every run records the reference, metric, margin and α its verdicts are decided on before its
first trial. A fixed-seed ablation table that can be continued into ``--seeds auto`` also
records the sequential design it is the pilot look of (``design``: ``SeedDesign.plan(pilot=
<its seeds>, max_seeds=<--max-seeds>)``, and ``seeds``: the seed order up to ``max_seeds``), so
its verdicts are that look's and continuing it changes nothing already decided: one α for the
whole workflow (docs/verdicts.md, "From a fixed run to answers"; measured by
:mod:`tools.workflow_simulation`).

A table decided on other settings than the planned ones (``report --margin 10%``) is
exploratory: :func:`departures` names what differs, :func:`exploratory_note` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ablations.config.comparison import Decision
from ablations.results.stats.sequential import DEFAULT_MAX_SEEDS, SeedDesign
from ablations.results.stats.shared_variance import DEFAULT_TEST, PAIRED_TEST, TEST_VERSIONS

PLANNED_KEY = "planned"  # experiment.json's key
SETTINGS = ("reference", "metric", "margin", "alpha")


def planned_record(decision: Decision, *, seeds: Sequence[int] = (),
                   max_seeds: Optional[int] = None, test: str = DEFAULT_TEST) -> dict[str, Any]:
    """experiment.json's ``planned``: the four settings of ``decision`` (each given); with
    ``seeds`` (a fixed table that can be continued into rounds), also the design whose pilot
    look they are and the seed order up to ``max_seeds`` (default
    :data:`ablations.results.stats.sequential.DEFAULT_MAX_SEEDS`). A run of at least
    ``max_seeds`` seeds gets a one-look design: the fixed design at full α. The decision's
    ``max_failure_rate``, the tolerance for divergence, is recorded where given (`equivalent`
    needs the failure-rate bound below it). ``test``: the test the verdicts are decided with,
    recorded with its version (:func:`verdict_test`)."""
    record: dict[str, Any] = {"reference": decision.reference, "metric": decision.metric,
                              "margin": str(decision.margin), "alpha": float(decision.alpha),
                              "test": {"name": test, "version": TEST_VERSIONS[test]}}
    if decision.max_failure_rate is not None:
        record["max_failure_rate"] = float(decision.max_failure_rate)
    if len(seeds) >= 2:
        fixed = [int(s) for s in seeds]
        most = max_seeds or DEFAULT_MAX_SEEDS
        design = (SeedDesign.plan(len(fixed), most) if most > len(fixed)
                  else SeedDesign.fixed(len(fixed)))
        record["design"] = design.to_dict()
        record["seeds"] = seed_order(fixed, design.max_seeds)
    return record


def verdict_test(planned: Optional[dict[str, Any]]) -> str:
    """The test an experiment decides with: the one its ``planned`` records, else (an
    experiment recorded before tests were recorded, or with no record) the seed-paired t test
    per arm it was decided with then, so a report or a resume never changes its verdicts'
    test."""
    recorded = (planned or {}).get("test") or {}
    name = recorded.get("name")
    return name if name in TEST_VERSIONS else PAIRED_TEST


def seed_order(fixed: Sequence[int], max_seeds: int) -> list[int]:
    """The fixed run's seeds (the pilot), then the smallest seeds it did not run, up to
    ``max_seeds`` in all."""
    order, used, candidate = list(fixed), set(fixed), 0
    while len(order) < max_seeds:
        if candidate not in used:
            order.append(candidate)
        candidate += 1
    return order


def pilot_design(planned: Optional[dict[str, Any]]) -> Optional[SeedDesign]:
    """The sequential design a fixed run is the pilot look of; None for a run without one, or
    whose design has a single look (its verdicts are the fixed design's at full α)."""
    if not planned or not planned.get("design"):
        return None
    design = SeedDesign.from_dict(planned["design"])
    return design if len(design.looks) > 1 else None


def same_margin(given: str | float, planned: str | float) -> bool:
    """Whether two margins as given on the command line are the same (``5%`` and ``5.0%``;
    ``0.02`` and ``0.020``; a percentage is never the same as a value in units)."""
    given, planned = str(given).strip(), str(planned).strip()
    if given == planned:
        return True
    try:  # "5%" and "5.0%", "0.02" and "0.020"
        return (given.endswith("%") == planned.endswith("%")
                and float(given.rstrip("%")) == float(planned.rstrip("%")))
    except ValueError:
        return False


def departures(planned: Optional[dict[str, Any]], *, reference: str, metric: str,
               margin: str | float, alpha: float) -> list[str]:
    """The settings given that differ from ``planned`` (the settings recorded before the
    data: :func:`ablations.results.stats.analyses.recorded_settings`), each as ``margin 10%
    (planned 5%)``; empty when they agree or nothing was planned."""
    if not planned:
        return []
    differ = []
    if planned.get("reference") and reference != planned["reference"]:
        differ.append(f"reference {reference} (planned {planned['reference']})")
    if planned.get("metric") and metric != planned["metric"]:
        differ.append(f"metric {metric} (planned {planned['metric']})")
    if planned.get("margin") is not None and not same_margin(margin, planned["margin"]):
        differ.append(f"margin {margin} (planned {planned['margin']})")
    if planned.get("alpha") is not None and float(alpha) != float(planned["alpha"]):
        differ.append(f"alpha {float(alpha):g} (planned {float(planned['alpha']):g})")
    return differ


def exploratory_note(differ: Sequence[str]) -> str:
    """One line over a table decided on settings other than the planned ones."""
    return (f"EXPLORATORY: decided on {', '.join(differ)}, not the settings fixed before the "
            "data; these are not the experiment's verdicts (its own: the same command without "
            "these flags).")


def pilot_note(design: SeedDesign, alpha: float) -> str:
    """One line under a fixed run's table that is the pilot look of ``design``."""
    share = design.levels(alpha, equivalence=False)[0]
    looks = ", ".join(str(n) for n in design.looks)
    return (f"These {design.looks[0]} seeds are the pilot look of a sequential design planned "
            f"before the run (looks at {looks} seeds per variant): its verdicts are tested at "
            f"the pilot's share of alpha (worse/better nominal {share:.2g} before Holm), so "
            "continuing with --seeds auto changes none of them.")
