"""The analysis of a table at fixed seeds (the grid's design), and the base of every design's
analysis: :class:`Analysis` (:mod:`ablations.results.stats.analyses` says what an analysis
answers and finds the one of an experiment).

Its verdicts are decided at full α, or, for a table planned as the pilot look of a sequential
design, at that look's levels; :func:`looks_sentence` is the methods' sentence on a sequential
design, the pilot's and the rounds' (:mod:`ablations.results.stats.analysis_rounds`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
    NOT_GIVEN,
    Decision,
)
from ablations.results.io.directions import metric_of
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.planned import (
    PLANNED_KEY,
    SETTINGS,
    departures,
    pilot_design,
    pilot_note,
    verdict_test,
)
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.verdicts import verdict_table

Cite = Callable[..., str]  # citation keys -> the text that cites them (methods.py's)


def settings_from(record: Optional[dict[str, Any]], meta: dict[str, Any]
                  ) -> Optional[dict[str, Any]]:
    """The four settings a record fixed before the data (``planned``, or a ``--seeds auto``
    run's design record); None for no record."""
    if not record:
        return None
    return {"reference": record.get("reference") or meta.get("reference") or DEFAULT_REFERENCE,
            **{key: record.get(key) for key in SETTINGS[1:]}}


class Analysis:
    """A table at fixed seeds (the grid's analysis, and the base of every other): verdicts at
    full α (:func:`~ablations.results.stats.verdicts.verdict_table`), or, for a table planned
    as the pilot look of a sequential design (experiment.json's ``planned`` with a
    ``design``), that look's verdicts (``attrs["pilot"]`` True)."""

    name = "table"  # the design's registered name (ablations/experiment/designs/records.py)
    record_key: Optional[str] = None  # experiment.json's key of the design's record
    has_verdicts = True  # its trials form an ablation table with verdicts
    table_names: tuple[str, ...] = ()  # the tables :meth:`table` gives besides the verdicts

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.planned: Optional[dict[str, Any]] = meta.get(PLANNED_KEY)
        # the sequential design this table is the pilot look of (None: none, or one look)
        self.pilot: Optional[SeedDesign] = pilot_design(self.planned)

    @classmethod
    def recorded_in(cls, meta: dict[str, Any]) -> bool:
        """Whether ``meta`` (an experiment.json) holds this design's record."""
        return bool(cls.record_key and meta.get(cls.record_key))

    @property
    def record(self) -> dict[str, Any]:
        """experiment.json's record of this design."""
        return self.meta[self.record_key] if self.record_key else {}

    @property
    def looks(self) -> bool:
        """Whether its verdicts are looks of a sequential design (each decided at its look's
        level; the report shows the look's p-values)."""
        return self.pilot is not None

    @property
    def decided_at(self) -> bool:
        """Whether its verdicts were decided at different looks (the summary's
        ``decided_at`` column)."""
        return False

    @property
    def max_failure_rate(self) -> Optional[float]:
        """The tolerance for divergence recorded before the data (``equivalent`` needs each
        arm's failure-rate bound below it); None: none."""
        return (self.planned or {}).get("max_failure_rate")

    @property
    def verdict_test(self) -> str:
        """The test its verdicts are decided with: the one recorded before the data
        (:func:`~ablations.results.stats.planned.verdict_test`)."""
        return verdict_test(self.planned)

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        """The reference, metric, margin and α recorded before the data; None for an
        experiment recorded before such records."""
        return settings_from(self.planned, self.meta)

    def decision(self, given: Decision = NOT_GIVEN) -> Decision:
        """The decision to decide with: each of ``given``'s settings, else the one recorded
        before the data, else the defaults (the space's reference, test_mae, 5%, 0.05); the
        tolerance for divergence is always the recorded one (:attr:`max_failure_rate`)."""
        planned = self.recorded_settings() or {}
        return Decision(
            reference=given.reference or planned.get("reference") or self.meta.get("reference")
            or DEFAULT_REFERENCE,
            metric=given.metric or planned.get("metric") or DEFAULT_METRIC,
            margin=given.margin if given.margin is not None else planned.get("margin")
            or DEFAULT_MARGIN,
            alpha=given.alpha if given.alpha is not None else float(planned.get("alpha")
                                                                     or DEFAULT_ALPHA),
            max_failure_rate=self.max_failure_rate)

    def with_metric(self, decision: Decision) -> Decision:
        """``decision`` with the metric as its :class:`~ablations.config.metrics.Metric`:
        the direction and unit the experiment's own code declared (``meta``'s ``metrics``),
        else the built-in model's."""
        return replace(decision, metric=metric_of(decision.metric, self.meta.get("metrics")))

    def verdicts(self, trials: pd.DataFrame, given: Decision = NOT_GIVEN) -> pd.DataFrame:
        """The verdict table of ``trials`` as the design decides it, at the settings
        ``given`` (those not given: recorded); a table decided on others is exploratory:
        ``attrs["exploratory"]`` lists what differs, ``attrs["settings"]`` the four it was
        decided on.

        Raises:
            ValueError: no verdicts are possible; the message says why.
        """
        decision = self.decision(given)
        table = self.decide(evaluation_rows(trials), self.with_metric(decision))
        table.attrs["exploratory"] = departures(self.recorded_settings() or {},
                                                **decision.terms())
        table.attrs["settings"] = decision.terms()
        return table

    def decide(self, trials: pd.DataFrame, decision: Decision) -> pd.DataFrame:
        """The verdict table of the evaluation rows ``trials`` at ``decision`` (its metric a
        Metric)."""
        if self.pilot is None:
            return verdict_table(trials, **decision.terms(),
                                 max_failure_rate=self.max_failure_rate, test=self.verdict_test)
        table = sequential_verdict_table(trials, self.pilot, self.planned["seeds"],
                                         **decision.terms(),
                                         max_failure_rate=self.max_failure_rate,
                                         test=self.verdict_test)
        table.attrs["pilot"] = True
        return table

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """The design's table ``name`` (one of :attr:`table_names`) of ``trials`` (every row
        of trials.parquet) at the settings ``given`` (those not given: recorded); None for a
        name the design has no table of.

        Raises:
            ValueError: the table is not possible (the message says why).
        """
        return None

    def across(self, trials: pd.DataFrame,
               per_dataset: Optional[dict[str, pd.DataFrame]] = None,
               given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """Each variant's verdict across the datasets; None for an experiment on one
        (:class:`~ablations.results.stats.analysis_datasets.DatasetsAnalysis` has them)."""
        return None

    def design_note(self, alpha: float) -> Optional[str]:
        """One line on how the design reached its verdicts (the summary and the report put
        it under the verdicts' note); None for a table at full α."""
        return pilot_note(self.pilot, alpha) if self.pilot is not None else None

    def summary_notes(self, trials: pd.DataFrame, alpha: float) -> list[str]:
        """The lines under the summary's notes (``trials``: the evaluation rows)."""
        note = self.design_note(alpha)
        return [note] if note else []

    def methods_sentences(self, cite: Cite) -> list[str]:
        """The methods paragraph's sentences on the design, after the comparison's
        (``cite``: citation keys -> the text citing them)."""
        design = (self.planned or {}).get("design")
        return [looks_sentence(design, cite, pilot=True)] if design else []

    def baseline_check(self, trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                       reference: str) -> Any:
        """Whether the reference learned (:func:`ablations.results.stats.baseline_check.
        baseline_check` on the evaluation rows ``trials``); None for a design without
        verdicts, whose reference nothing is compared with."""
        from ablations.results.stats.baseline_check import baseline_check

        if not self.has_verdicts:
            return None
        return baseline_check(trials, epochs, reference=reference)


def looks_sentence(design: dict[str, Any], cite: Cite, *, pilot: bool) -> str:
    """The methods' sentence on a sequential design (experiment.json's ``design``): the
    looks and how α was spent across them; ``pilot``: a fixed run that is its first look."""
    looks = design["looks"]
    shares = ", ".join(f"{s:.0%}" for s in design["diff_spend"])
    return (("The fixed seeds were the pilot look of a group-sequential design"
             if pilot else "Seeds were added in rounds where no verdict was reached yet")
            + f", with looks at {', '.join(map(str, looks))} seeds per variant; α was spent "
            f"across the looks{cite('lan1983')}: for worse or better {shares} of α at the "
            "successive looks, for equivalence the power family α·(n/N)² "
            f"{cite('kim1987').strip()}. A variant stopped at its first verdict"
            + ("; the verdicts here are the pilot look's, tested at its levels."
               if pilot else "."))
