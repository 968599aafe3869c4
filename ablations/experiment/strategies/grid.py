"""A grid of fixed seeds: every planned trial runs once, the longest first; Tune's
BasicVariantGenerator over the trial names (their configurations go to the trainable)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ablations.experiment.strategies.base import Strategy

if TYPE_CHECKING:
    from ablations.config import TrialConfig
    from ablations.experiment.progress import Planned
    from ablations.experiment.options import RunOptions
    from search_spaces import TrialSpec


class Grid(Strategy):
    """The planned trials, each run once (an ablation table at fixed seeds)."""

    kind = "grid"
    continues_into_rounds = True

    def tune_setup(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                   planned: dict[str, Planned]) -> tuple[dict[str, Any], Any]:
        from ray import tune

        from ablations.experiment.trainable import trial_name
        from ablations.trial.cost import longest_first

        # The grid holds names (readable in the progress table); configs go in the plan.
        # Longest trials first: the short ones fill the slots at the end (ablations/trial/cost.py).
        order = longest_first([spec.config for spec in trials],
                              [planned[spec.name].cost for spec in trials])
        param_space = {"trial": tune.grid_search([trials[i].name for i in order])}
        tune_config = tune.TuneConfig(
            max_concurrent_trials=options.max_concurrent or None,
            # one worker process runs many trials (torch imported once), unless isolated
            reuse_actors=options.reuse_workers,
            trial_name_creator=trial_name,
            trial_dirname_creator=trial_name,
        )
        return param_space, tune_config

    def count(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
              crossed: bool = False) -> str:
        cells = f", crossed: {len(seeds)}x{len(seeds)} cells" if crossed else ""
        return (f"{len(trials)} trials ({len({s.variant for s in trials})} variants x "
                f"{len(seeds)} seeds{cells})")

    def describe(self, trials: Sequence[TrialSpec], base: TrialConfig,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        return [describe_trials(trials, base, skipped)]

    def design_lines(self, alpha: float) -> list[str]:
        from results.stats.planned import pilot_design, pilot_note

        design = pilot_design(self.planned)
        return [pilot_note(design, alpha)] if design is not None else []


def describe_trials(trials: Sequence[Any], base: TrialConfig,
                    skipped: Sequence[tuple[Any, str]] = ()) -> str:
    """The dry-run listing: the base config once, then each trial and what differs from it,
    then the skipped cells with their reasons."""
    lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped else "")
             + ". Base configuration:"]
    for key, value in base.flat().items():
        if key not in ("ablation", "seed"):
            lines.append(f"  {key}: {value}")
    lines.append("Trials (name: differences from the base):")
    for index, spec in enumerate(trials, 1):
        diff = spec.config.diff(base)
        diff.pop("ablation", None)
        diff.pop("seed", None)
        shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(base)"
        lines.append(f"  {index:>3}. {spec.name:<32} {shown}")
    if skipped:
        lines.append("Skipped (conflicts with this device or data; not run):")
        for spec, reason in skipped:
            lines.append(f"   SKIP {spec.name:<32} {reason}")
    return "\n".join(lines)
