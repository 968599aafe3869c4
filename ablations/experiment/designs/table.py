"""A grid of fixed seeds: every planned trial runs once, the longest first, in one Tune
experiment (:class:`~ablations.experiment.execution.tune_setup.TableTune`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from ablations.config.values import arg
from ablations.experiment.designs.base import Design
from ablations.experiment.designs.resume_text import counts_line
from ablations.experiment.execution.tune_setup import TableTune, Part
from ablations.experiment.core.options import TUNE_SUBDIR
from ablations.experiment.execution.runner import run_experiment

if TYPE_CHECKING:
    from ablations.experiment.core.options import ExperimentResult, RunOptions
    from ablations.search_spaces import TrialSpec


class Table(Design):
    """The planned trials, each run once (an ablation table at fixed seeds)."""

    continues_into_rounds = True
    grows = True
    tune_subdir = TUNE_SUBDIR  # the Tune run to continue: a grown table's last growth's

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
                ) -> ExperimentResult:
        # a growth's new trials are a Tune run of their own (resuming.growth names its folder)
        subdir = options.grown["tune"] if options.grown else self.tune_subdir
        return run_experiment(trials, options, skipped, design=self,
                              setup=TableTune(Part(subdir)), resume=resume)

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Table:
        design = super().from_record(meta, root)
        grown = meta.get("grown") or []
        if grown and cls.grows:
            design.tune_subdir = grown[-1]["tune"]
        return design

    def resume_line(self, name: str, space: str, target: str, trials: Sequence[TrialSpec],
                    retry_failed: bool) -> str:
        counts = counts_line(target, trials, None, retry_failed, self.tune_subdir)
        return f"Resuming experiment {name} ({space}): {counts}"

    @classmethod
    def rounds_refusal(cls, name: str, meta: dict[str, Any], resume: str) -> Optional[str]:
        """A table on several datasets is not continued: each dataset's verdicts are the
        fixed design's at full alpha (docs/datasets.md)."""
        datasets = {config.get("dataset") for config in (meta.get("trials") or {}).values()}
        if len(datasets) > 1:
            return (f"{name} ran on several datasets; {arg('seeds')} auto continues an "
                    "experiment on one: start one per dataset")
        return super().rounds_refusal(name, meta, resume)

    def dry_run_lines(self, alpha: float) -> list[str]:
        from ablations.results.stats.planned import pilot_design, pilot_note  # loads scipy

        planned = pilot_design(self.planned)
        return [pilot_note(planned, alpha)] if planned is not None else []
