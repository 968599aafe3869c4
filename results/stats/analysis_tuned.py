"""The analysis of tuned ablations (``--tune-each``): the verdicts of the evaluation at the
configuration given, and both evaluations side by side (:mod:`ablations.results.stats.tuned`)."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.results.stats.analysis_table import Analysis, Cite


class TunedAnalysis(Analysis):
    """Tuned ablations (``--tune-each``): the verdicts of the evaluation at the configuration
    given, and both evaluations side by side (table ``tuned``)."""

    name = "tuned"
    record_key = "tuned"
    table_names = ("tuned",)

    @property
    def keys(self) -> list[str]:
        """The tuned keys."""
        return self.record.get("keys", [])

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        if name != "tuned":
            return None
        from ablations.results.stats.tuned import side_by_side

        return side_by_side(trials, keys=self.keys,
                            **self.with_metric(self.decision(given)).terms(),
                            max_failure_rate=self.max_failure_rate)

    def methods_sentences(self, cite: Cite) -> list[str]:
        record = self.record
        budget, startup = record.get("budget", "?"), record.get("startup_trials", "?")
        return [
            f"Every arm was also tuned with the same budget: {budget} trials of Optuna's TPE "
            f"sampler{cite('akiba2019')} through Ray Tune per arm, the first {startup} of "
            f"them at random, over {', '.join(self.keys) or 'no key'} in the same ranges and "
            f"with the same sampler seed for every arm, each trial trained for the same "
            f"epochs (no early stopping) and chosen on {record.get('metric', '?')}; each "
            "arm's best configuration was then evaluated over the same seeds and compared "
            "with the reference at its own best in the same way, each evaluation a family "
            "of its own for Holm's correction.", *super().methods_sentences(cite)]
