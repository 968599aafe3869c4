"""The analysis of ``--seeds auto``'s rounds: the sequential design's verdicts, each at the look
that decided it, its notes on the design and the compute spent, and a continued fixed run's
note (:func:`continuation_note`)."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import Decision
from ablations.config.statuses import TrialStatus
from ablations.results.stats.analysis_table import Analysis, Cite, looks_sentence, settings_from
from ablations.results.stats.planned import verdict_test
from ablations.results.stats.sequential import SeedDesign, design_note, seed_span
from ablations.results.stats.sequential_table import (
    compute_note,
    compute_spent,
    sequential_verdict_table,
)


class RoundsAnalysis(Analysis):
    """``--seeds auto``: the sequential design's verdicts, each at the look that decided it
    (experiment.json's ``rounds``: the design, its seed order and the rounds)."""

    name = "rounds"
    record_key = "rounds"

    def __init__(self, meta: dict[str, Any]) -> None:
        super().__init__(meta)
        self.pilot = None  # its looks are its own design's, not a planned table's
        self.seed_design = SeedDesign.from_dict(self.record["design"])

    @property
    def looks(self) -> bool:
        return True

    @property
    def decided_at(self) -> bool:
        return True

    @property
    def verdict_test(self) -> str:
        # the rounds' record's (a fixed run continued keeps its planned test there)
        return verdict_test(self.record if self.record.get("test") else self.planned)

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        # planned, or (an experiment recorded before it) the rounds' record
        return settings_from(self.planned or self.record, self.meta)

    def decide(self, trials: pd.DataFrame, decision: Decision) -> pd.DataFrame:
        return sequential_verdict_table(trials, self.seed_design, self.record["seeds"],
                                        **decision.terms(),
                                        max_failure_rate=self.max_failure_rate,
                                        test=self.verdict_test)

    @property
    def max_failure_rate(self) -> Optional[float]:
        """The tolerance the rounds decided with (their record's; a fixed run continued into
        rounds keeps the one it planned)."""
        return self.record.get("max_failure_rate", (self.planned or {}).get(
            "max_failure_rate"))

    def design_note(self, alpha: float) -> Optional[str]:
        return design_note(self.seed_design, alpha)

    def summary_notes(self, trials: pd.DataFrame, alpha: float) -> list[str]:
        notes = [design_note(self.seed_design, alpha),
                 compute_note(compute_spent(trials, self.seed_design.max_seeds), trials)]
        if self.record.get("continued"):  # a fixed run continued with --seeds auto
            notes.append(continuation_note(trials, self.record["continued"]))
        return notes

    def methods_sentences(self, cite: Cite) -> list[str]:
        return [looks_sentence(self.record["design"], cite, pilot=False)]


def continuation_note(trials: pd.DataFrame, continued: dict[str, Any]) -> str:
    """Under the summary of a continued experiment: where its verdicts come from and the
    compute the continuation added to the fixed run's."""
    ran = trials[trials["status"] != TrialStatus.SKIPPED]
    total_cpu, total_gpu = float(ran["cpu_hours"].sum()), float(ran["gpu_hours"].sum())
    added_trials = len(ran) - int(continued["trials"])
    gpu = total_gpu > 0
    added = (total_gpu - continued["gpu_hours"]) if gpu else (total_cpu - continued["cpu_hours"])
    unit = "GPU-hours" if gpu else "CPU-hours"
    seeds = continued["seeds"]
    source = ("the fixed run's table was its pilot look, planned before the first trial, and "
              "every verdict it gave stands" if continued.get("planned") else
              "none from the fixed table")
    return (f"Continued from a fixed run of {len(seeds)} seeds ({seed_span(seeds)}), its pilot: "
            f"every verdict above comes from the sequential design; {source}. The "
            f"continuation added {added_trials} trials, {added:.3g} {unit}; total "
            f"{len(ran)} trials, {(total_gpu if gpu else total_cpu):.3g} {unit}.")
