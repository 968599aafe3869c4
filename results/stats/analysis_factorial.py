"""The analysis of a two-level factorial design (``--design factorial``, docs/factorial.md):
its cells' verdicts as a table's, and its effects (:mod:`ablations.results.stats.factorial`)."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.results.stats.analysis_table import Analysis, Cite


class FactorialAnalysis(Analysis):
    """A two-level factorial design (``--design factorial``): its cells' verdicts against the
    reference cell, and its main effects and interactions (table ``effects``)."""

    name = "factorial"
    record_key = "factorial"
    table_names = ("effects",)

    @property
    def design(self) -> Any:
        """The :class:`~ablations.results.stats.factorial_design.FactorialDesign`."""
        from ablations.results.stats.factorial_design import FactorialDesign

        return FactorialDesign.from_dict(self.record)

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        if name != "effects":
            return None
        from ablations.results.stats.factorial import factorial_effects  # statsmodels

        decision = self.with_metric(self.decision(given))
        return factorial_effects(trials, self.design, metric=decision.metric,
                                 margin=decision.margin, alpha=decision.alpha)

    def methods_sentences(self, cite: Cite) -> list[str]:
        design = self.design
        cells = len(design.runs)
        words = [
            f"The variants were the {cells} cells of a two-level design ({design.label}) in "
            f"{design.k} switches ({', '.join(design.factors)}), the reference cell among "
            "them. Each main effect and two-factor interaction was estimated from one "
            "ordinary least-squares fit of every cell at every seed, with the seeds as "
            "blocks, and given a t interval on the fit's residual degrees of freedom, a "
            "two-sided t-test and two one-sided tests against the same margin, with Holm's "
            f"correction over the family of effects{cite('holm1979')}; a main effect is the "
            "mean change when its switch is flipped from the reference cell's value, "
            "averaged over the other switches."]
        if design.fraction:
            words.append(f"In this fraction each effect is confounded with its aliases "
                         f"(defining relation {design.defining_relation()}); an estimate "
                         "is the sum over its alias chain.")
        return words + super().methods_sentences(cite)
