"""The sections of one dataset's report (:mod:`ablations.results.report.build`), each from
the analysis' tables: the verdicts and how they were decided, the seed variance by source, the
grids by stratum, own code's metrics, the figures, the ablation table and a regression's
per-sample sections (uncertainty, errors by stratum, where an ablation hurts). A design's own
sections are :mod:`ablations.results.report.designs`'."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from ablations.config.comparison import Decision
from ablations.config.metrics import Metric
from ablations.results.report.designs import DesignReport
from ablations.results.report.formatting import plain
from ablations.results.report.page import Section
from ablations.results.report.tables import (
    FLAG,
    ablation_view,
    declared_metrics_view,
    seed_variance_view,
    strata_grids,
    verdict_view,
)
from ablations.results.stats.analysis import (
    seed_ensemble,
    short_verdict_note,
    stratified_effects,
    stratified_errors,
    uncertainty_table,
)
from ablations.results.stats.planned import exploratory_note
from ablations.results.stats.seed_variance import seed_variance_note, seed_variance_table
from ablations.results.stats.uncertainty import one_draw
from ablations.results.stats.undecided import undecided_lines


@dataclass
class Strata:
    """The per-stratum tables of the test samples."""
    errors: pd.DataFrame  # each variant's MAE, RMSE and bias per stratum level
    effects: pd.DataFrame  # each variant's difference to the reference per cell
    hurts: pd.DataFrame  # the cells whose effect differs from the variant's overall one


def stratum_tables(predictions: pd.DataFrame, *, reference: str, alpha: float) -> Strata:
    """The stratum tables of ``predictions`` (empty ones where there are none, or none of
    the reference)."""
    errors = stratified_errors(predictions, reference=reference) if len(predictions) \
        else pd.DataFrame()
    has_reference = len(predictions) and (predictions["ablation"] == reference).any()
    effects = stratified_effects(predictions, reference=reference, alpha=alpha) \
        if has_reference else pd.DataFrame(columns=["differs"])
    hurts = effects[effects["differs"].astype(bool)].drop(columns=["differs", "interaction_p"],
                                                          errors="ignore")
    return Strata(errors, effects, hurts)


@dataclass
class Figures:
    """The report's own figures (the design's draw their own); None: not drawn."""
    forest: Path
    curves: Optional[Path]
    heatmap: Optional[tuple[str, Path]]  # the first stratum and its heatmap
    calibration: Optional[Path]


def verdict_sections(ablation: pd.DataFrame, ties: list[str], note: str, forest: Path, *,
                     design: DesignReport, looks: Optional[bool], measure: Metric,
                     alpha: float) -> list[Section]:
    """The verdicts, how they were decided (in the appendix, with what would decide each
    undecided variant) and the forest plot of the differences."""
    exploratory = ablation.attrs["exploratory"]
    undecided = undecided_lines(ablation)  # the appendix's lines, one per undecided variant
    return [
        Section("Verdicts (exploratory)" if exploratory else "Verdicts",
                "\n\n".join([*([exploratory_note(exploratory)] if exploratory else []),
                             *ties, short_verdict_note(ablation)]),
                verdict_view(ablation, metric=measure, alpha=alpha, per_look=looks)),
        Section("How the verdicts were decided",
                f"{note} Seeds: the ok trials per variant. The interval of Δ is "
                f"the {1 - 2 * alpha:.0%} interval TOST reads; 'equivalent within ±' is the "
                "smallest margin at which the variant would be equivalent (Holm): it describes "
                "the data; the verdict is at the margin fixed before them."
                + design.verdicts_text()
                + ("\n\n" + "\n".join(f"- {line}" for line in undecided)
                   if undecided else ""), appendix=True),
        Section("Differences to the reference", (
            f"Each variant's mean over the reference's, minus 1 (%), with Fieller's "
            f"{1 - 2 * alpha:.0%} interval (the one TOST reads); the shaded band is the margin."
            if ablation.attrs.get("relative") else
            f"Each variant's Δ with its {1 - alpha:.0%} interval (thin"
            + ("; repeated over the looks, so it keeps its coverage where the variant stopped"
               if ablation.attrs.get("diff_ci") == "repeated" else "")
            + f") and {1 - 2 * alpha:.0%} interval (thick); the shaded band is the margin."),
            figure=forest),
    ]


def seed_variance_sections(trials: pd.DataFrame, *, decision: Decision,
                           measure: Metric) -> list[Section]:
    """The seed variance by source: only a run that crossed seed sources (--cross-seeds) has
    its table."""
    metric, alpha = decision.metric, decision.alpha
    sources = seed_variance_table(trials, metric=metric, alpha=alpha)
    if not len(sources):
        return []
    return [Section("Seed variance by source", seed_variance_note(
        sources, metric=metric, alpha=alpha), seed_variance_view(
            sources, metric=measure, alpha=alpha))]


def stratum_sections(strata: Strata, ablation: pd.DataFrame, *, reference: str,
                     alpha: float) -> list[Section]:
    """Per stratum of the test data, a variant × level grid of the differences to the
    reference; none without strata."""
    grids = strata_grids(strata.effects, strata.errors, reference=reference,
                         variants=list(ablation["ablation"].astype(str)))
    if not grids:
        return []
    sections = [Section(
        "By stratum", f"Per stratum of the test data (numeric ones and the target in "
        f"quartile bins): each variant's difference of the MAE to `{reference}` in that "
        "stratum (km), with its "
        f"{1 - alpha:.0%} interval over seeds where there are two or more. {FLAG}: the "
        "effect in that cell differs from the variant's overall effect (Holm over the "
        f"variant's cells, α = {alpha:g}; listed under 'Where it hurts' in the appendix).")]
    for stratum, grid in grids.items():
        title = "target (km), in quartile bins" if stratum == "target_bin" else stratum
        sections.append(Section(title, table=grid, level=3))
    return sections


def metrics_sections(trials: pd.DataFrame, meta: dict) -> list[Section]:
    """Each metric own code declares, per variant; none for the built-in model."""
    if not meta.get("metrics"):
        return []
    return [Section("Metrics", "Each metric the code declares (its unit as declared): mean "
                    "and standard deviation over the ok seeds of each variant.",
                    declared_metrics_view(trials, meta["metrics"]))]


def figure_sections(figures: Figures) -> list[Section]:
    """The learning curves, the heatmap and the calibration, those that were drawn."""
    return [
        *([Section("Learning curves", figure=figures.curves)]
          if figures.curves is not None else []),
        *([Section(f"MAE by {figures.heatmap[0]}", figure=figures.heatmap[1])]
          if figures.heatmap else []),
        *([Section("Calibration", "Observed coverage of central predictive intervals "
                   "against their nominal level.", figure=figures.calibration)]
          if figures.calibration else []),
    ]


def ablation_section(ablation: pd.DataFrame, *, measure: Metric,
                     decision: Decision) -> Section:
    """The ablation table, folded: each variant's mean and its paired difference."""
    alpha = decision.alpha
    return Section(
        "Ablation table", f"{decision.metric}: mean and {1 - alpha:.0%} t interval over seeds; "
        f"the paired difference to `{decision.reference}` over the seeds both ran (t interval, "
        "paired t-test, Holm over the ablations, Cohen's d_z; a variant run under other "
        "seeds than the reference: Welch's t-test and Cohen's d). Trials that are not "
        "ok are excluded and counted.", ablation_view(ablation, metric=measure, alpha=alpha),
        collapsed=True)


def regression_sections(predictions: pd.DataFrame, trials: pd.DataFrame, strata: Strata, *,
                        reference: str, alpha: float) -> list[Section]:
    """The per-sample sections of a regression: uncertainty of single models and of seed
    ensembles, and in the appendix the errors by stratum and where an ablation hurts."""
    ensemble, ensemble_note = _ensemble(predictions, trials)
    return [
        Section("Uncertainty (single models)", "Gaussian NLL and CRPS (km), coverage of "
                "central intervals, sharpness (mean predicted std), spread-skill (Spearman of "
                "std with |error|). Models without a variance head have no row.",
                plain(uncertainty_table(predictions)), collapsed=True),
        Section("Uncertainty (seed ensembles)", ensemble_note, plain(ensemble),
                collapsed=True),
        Section("Errors by stratum", "MAE, RMSE and bias (km) per stratum, and the MAE "
                f"difference to `{reference}` in the same stratum.", plain(strata.errors),
                appendix=True),
        Section("Where it hurts", "Cells (a stratum level or target bin) where an ablation's "
                "effect on the absolute error differs from its overall effect: diff_mean, the "
                f"seed-paired difference to `{reference}` in the cell (km) with its "
                f"{1 - alpha:.0%} t interval; overall_diff, the same over all test samples; a "
                "one-sample t-test over seeds of (cell − overall difference), Holm over every "
                f"cell of that ablation, below {alpha:g}." + (
                    "" if len(strata.hurts) else " No cell differs."), plain(strata.hurts),
                appendix=True),
    ]


def _ensemble(predictions: pd.DataFrame, trials: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The uncertainty of each arm's seeds as an ensemble, with its note; an arm whose seeds
    drew different data has none (its sample indices name different samples)."""
    pooled, mixed = one_draw(predictions, trials)
    ensemble = uncertainty_table(seed_ensemble(pooled)) if len(pooled) else pd.DataFrame()
    note = ("Each test sample's predictions across seeds as an ensemble: mean of the "
            "means, mixture variance.")
    if mixed:
        which = "any arm" if pooled.empty else ", ".join(mixed)
        note += (f" Not shown for {which}: each seed drew its own data "
                 "(seed_sources has data), so a sample index names a different sample "
                 "per seed; hold the draw (--seed-sources init,order) for ensembles.")
    return ensemble, note
