"""A design of one's own, whole, in one file: ``--design tests.design_long:Long --long-factor 3``
(or ``Experiment(design=LongOptions(factor=3))``, or ``design="tests.design_long:Long"`` for
its defaults) runs an ablation table's variants with every trial trained for ``factor`` times
the epochs asked. docs/architecture.md's "Adding a design" walks through it;
tests/test_design_plugin.py plans, runs, resumes and reports with it.

What a design provides, each part here:

- its options (:class:`LongOptions`): its argument ``factor``, which it checks itself, and
  its command-line flag ``--long-factor``, which ``run --design tests.design_long:Long --help``
  lists;
- the run side (:class:`Long`): what it refuses (a table at fixed seeds
  only: the base's :meth:`~ablations.experiment.designs.base.Design.check_request`), its plan
  (:meth:`Long.plan`: the table's trials with their epochs multiplied), how it runs (a grid's
  single Tune experiment), its record in experiment.json and how a resume rebuilds it
  (:meth:`Long.record`, :meth:`Long.from_record`: from the recorded trials, whose epochs are
  already multiplied, so a resume does not multiply them again), and its words on the
  console (the run's first line, the lines after the summary);
- the results side (:class:`LongAnalysis`): found by its record in experiment.json, its
  verdicts a table's at full alpha, its sentence of the methods paragraph;
- the report's side (:class:`LongReport`): a sentence under the report's verdicts;
- one registration of the three under the design's name (``register_design`` at the end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

from ablations import (
    Analysis,
    DesignOptions,
    DesignReport,
    Flag,
    Table,
    register_design,
)

RECORD_KEY = "long"


@dataclass(frozen=True)
class LongOptions(DesignOptions):
    """The long design's options: every trial trained for ``factor`` times its epochs."""

    factor: int = 2
    kind: ClassVar[str] = "long"  # the design's registered name
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("long_factor", field="factor", metavar="N", at_least=1, default=2,
             help="with --design tests.design_long:Long: train every trial for N times "
             "its epochs"),
    )

    def problems(self) -> dict[str, Optional[str]]:
        ok = isinstance(self.factor, int) and not isinstance(self.factor, bool) \
            and self.factor >= 1
        return {"long_factor": None if ok else f"{self.factor!r} must be an integer >= 1"}

    def given(self) -> set[str]:
        return {"design", "long_factor"}


def factor_of(meta: dict[str, Any]) -> int:
    """The factor an experiment.json recorded."""
    return int(meta[RECORD_KEY]["factor"])


class Long(Table):
    """The table's trials, each trained for ``factor`` times its epochs, run once."""

    name = "long"
    record_key = RECORD_KEY
    asked_by = "--design long"
    options = LongOptions
    continues_into_rounds = False  # its seeds are fixed; rounds would be a grid's design

    def __init__(self, factor: int = LongOptions.factor) -> None:
        self.factor = factor

    @classmethod
    def plan(cls, request: Any, space: Any, trials: list[Any]) -> tuple[Long, list[Any]]:
        design = cls(cls.options_of(request).factor)
        return design, [type(spec)(spec.name, spec.variant, spec.seed, spec.config.replace(
            epochs=spec.config.flat()["epochs"] * design.factor)) for spec in trials]

    def record(self, metadata: dict[str, Any]) -> None:
        metadata[self.record_key] = {"factor": self.factor}

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Long:
        design = cls(factor_of(meta))
        design.planned = meta.get("planned")
        return design

    def count_text(self, trials: Sequence[Any], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        return (f"{super().count_text(trials, seeds, crossed)}, each trained for "
                f"{self.factor}x the epochs asked")

    def summary_lines(self, trials: Any, meta: dict[str, Any], decision: Any) -> list[str]:
        return [f"Long design: every trial trained for {factor_of(meta)}x the epochs asked."]


class LongAnalysis(Analysis):
    """A long design's trials: a table at full alpha, and its sentence of the methods."""

    name = "long"
    record_key = RECORD_KEY

    def methods_sentences(self, cite: Any) -> list[str]:
        return [f"Every trial trained for {factor_of(self.meta)} times the configured number "
                "of epochs (a long design)."]


class LongReport(DesignReport):
    """Under the report's verdicts: the factor."""

    def verdicts_text(self) -> str:
        return (f" Every trial trained for {factor_of(self.analysis.meta)}x the epochs asked "
                "(a long design).")


register_design(Long, analysis=LongAnalysis, report=LongReport)
