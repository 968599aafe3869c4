"""``python run_ablations.py report EXPERIMENT_DIR``: report.md and a self-contained report.html.

Both lead with the answer: the verdict table (each ablation `worse`/`better`/`equivalent`/
`negligible`/`inconclusive` against the reference at a margin, with the equivalence bound
reached) and the forest plot; then the comparison with another experiment (optional), the
compute spent (``--seeds auto``), per stratum a variant × level grid of the differences to the
reference with their intervals, and the figures (learning curves, stratum heatmap,
calibration). The ablation table and the uncertainty tables are folded (``<details>``); the
long per-stratum tables are in the appendix. Numbers are formatted for reading
(:mod:`ablations.results.report.formatting`, :mod:`ablations.results.report.tables`); the layout is
:mod:`ablations.results.report.page`'s and fits a 1366 px screen (:mod:`tools.browser_check` checks
it). The HTML embeds the figures as base64 PNGs, so it is one file to send around.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
import pyarrow as pa

from ablations.config.comparison import DEFAULT_METRIC, Decision
from ablations.config.statuses import TrialStatus
from ablations.results.report import plots
from ablations.results.report.formatting import plain
from ablations.results.stats.seed_ties import seed_tie_lines
from ablations.results.stats.analyses import analysis_of
from ablations.results.stats.analysis import (
    calibration_curve,
    dropped_note,
    load_experiments,
    seed_ensemble,
    stratified_effects,
    stratified_errors,
    uncertainty_table,
    short_verdict_note,
    verdict_note,
)
from ablations.results.stats.baseline_check import baseline_check
from ablations.results.stats.compare import compare_experiments, compare_note
from ablations.results.stats.uncertainty import one_draw
from ablations.results.stats.verdicts import margin_text
from ablations.results.stats.undecided import undecided_lines
from ablations.results.io.files import (
    TRIALS_FILE,
    atomic_write,
    first_line,
    is_uri,
    join,
    read_metadata,
)
from ablations.results.stats.phases import evaluation_rows
from ablations.results.report.designs import report_of
from ablations.results.report.folder import NotAnExperimentError, check_experiment
from ablations.results.report.page import FIGURES_DIR, Section, html_page, markdown_page
from ablations.results.report.tables import (
    FLAG,
    ablation_view,
    declared_metrics_view,
    comparison_view,
    seed_variance_view,
    strata_grids,
    verdict_view,
)
from ablations.results.stats.seed_variance import seed_variance_note, seed_variance_table
from ablations.results.stats.planned import exploratory_note
from ablations.results.io.directions import metric_of
from ablations.results.report.paper_files import write_paper_files



@dataclass
class Report:
    markdown: Path | str  # a Path for a local experiment, the URI for one in object storage
    html: Path | str
    # the verdict table as the design decided it (ablations.results.stats.decisions.verdicts_of):
    # the ablation table and the verdicts
    ablation: pd.DataFrame
    # ablations.results.stats.analysis.verdict_note: what the verdicts mean, margin and alpha
    note: str
    # the ablation table for a paper (results/report/paper.py): format -> the file written
    tables: dict = field(default_factory=dict)
    # over several datasets: the verdicts across them
    # (ablations.results.stats.datasets.across_datasets)
    across: Optional[pd.DataFrame] = None


# What the per-sample analyses (uncertainty, seed ensembles, strata, calibration) read
REGRESSION_COLUMNS = frozenset({"target", "pred_mean"})


def write_report(directory: str | Path, *, reference: str | None = None,
                 metric: str | None = None, margin: str | float | None = None,
                 alpha: float | None = None,
                 compare_with: str | Path | None = None,
                 formats: Sequence[str] = (), figures: str = "all") -> Report:
    """Analyse the experiment in ``directory`` (a path or a URI such as ``s3://bucket/exp``)
    and write report.md, report.html and the PNGs into it, each atomically. With
    ``compare_with`` (another experiment folder), a section compares this experiment with it
    variant by variant (:func:`ablations.results.stats.compare.compare_experiments`, the other one
    as A). ``formats`` (``latex``, ``markdown``, ``csv``): the ablation table for a paper as
    table.tex, table.md or table.csv too (:mod:`ablations.results.report.paper`). ``figures``:
    ``all`` writes each figure's PNG with its PDFs and SVGs, ``png`` the PNGs alone
    (:func:`ablations.results.report.plots.figure_formats`).

    ``margin`` and ``alpha`` are :func:`ablations.results.stats.analysis.verdict_table`'s. Each of
    ``reference``, ``metric``, ``margin`` and ``alpha`` left None is what the experiment
    recorded (experiment.json: the reference; for ``--seeds auto`` the metric, margin and α
    its rounds decided on), else baseline, test_mae, 5% and 0.05. The metric's direction and
    unit are those its own code declared (experiment.json's ``metrics``), else the built-in
    model's.

    Raises:
        NotAnExperimentError: see :func:`check_experiment`.
        MetadataError: a damaged experiment.json (ablations/results/io/record.py).
        ValueError: no ok trial, a ``reference`` that is not a variant, a ``metric`` that is
            not a numeric column, a bad ``margin``, ``alpha`` or ``figures``.
    """
    if figures not in plots.FIGURES:
        raise ValueError(f"figures {figures!r}: one of {', '.join(plots.FIGURES)}")
    check_experiment(directory)
    meta = read_metadata(directory) or {}  # a damaged one is refused, as --resume refuses it
    # each setting not given: the one fixed before the data (results/stats/planned.py)
    decision = analysis_of(meta).decision(Decision(reference=reference, metric=metric,
                                                   margin=margin, alpha=alpha))
    reference, metric, margin, alpha = (decision.reference, decision.metric, decision.margin,
                                        decision.alpha)
    try:
        tables = load_experiments(directory)
    except (OSError, pa.ArrowException) as exc:
        raise NotAnExperimentError(f"{directory}: cannot be read ({first_line(exc)})") from None
    trials, epochs, predictions = tables["trials"], tables["epochs"], tables["predictions"]
    if not len(trials):
        raise ValueError(f"{join(directory, TRIALS_FILE)}: no trials")
    variants = list(dict.fromkeys(trials["ablation"].astype(str)))
    if reference not in variants:
        raise ValueError(f"reference {reference!r} is not a variant of this experiment "
                         f"(variants: {', '.join(variants)}); pass --reference")
    ok = trials["status"] == TrialStatus.OK

    def measured(column: str) -> bool:  # a number in some ok trial (own code's NaN built-ins)
        return column in trials.columns and pd.api.types.is_numeric_dtype(trials[column]) \
            and bool(trials.loc[ok, column].notna().any())

    if ok.any() and not measured(metric):
        # what to name instead: the metrics its own code declared, else the built-in model's
        named = [*(meta.get("metrics") or {}), "test_mae", "test_rmse", "val_mae", "test_nll"]
        usable = [column for column in dict.fromkeys(named) if measured(column)]
        numeric = metric in trials.columns and pd.api.types.is_numeric_dtype(trials[metric])
        problem = "has no value in any ok trial" if numeric else "is not a numeric column"
        raise ValueError(f"metric {metric!r} {problem} of {TRIALS_FILE} "
                         f"(e.g. {', '.join(usable[:4]) or DEFAULT_METRIC})")
    if not ok.any():
        counts = trials["status"].value_counts().to_dict()
        raise ValueError(f"{directory}: no trial finished ok "
                         f"({', '.join(f'{n} {s}' for s, n in counts.items())}); nothing to "
                         "compare (trials.parquet has each trial's error)")
    if not (ok & (trials["ablation"] == reference)).any():
        raise ValueError(f"reference {reference!r} has no ok trial; pass another --reference "
                         f"(variants: {', '.join(variants)})")
    design = report_of(analysis_of(meta, trials))  # over several datasets: each one's
    design.refuse(directory, margin, compare_with)
    comparison = None
    if compare_with is not None:
        table = compare_experiments(compare_with, trials,
                                    metric=metric_of(metric, meta.get("metrics")),
                                    margin=margin, alpha=alpha, reference=reference)
        other = Path(str(compare_with).rstrip("/")).name
        comparison = (f"Compared with {other}", compare_note(
            table, a=other, b=str(trials["experiment"].iloc[0])), table[[
                "ablation", "n_a", "n_b", "n_pairs", "a_mean", "b_mean", "diff_mean",
                "tost_ci_low", "tost_ci_high", "p_holm", "p_tost_holm", "verdict"]])
    with tempfile.TemporaryDirectory(prefix="report-") as scratch, \
            plots.figure_formats(figures):
        return design.write(directory, trials, epochs, predictions, Path(scratch),
                            write_one=_write_report, write_file=_write_file,
                            report_type=Report, decision=decision, meta=meta,
                            comparison=comparison, formats=formats)


def _write_report(directory: str | Path, trials: pd.DataFrame, epochs: pd.DataFrame,
                  predictions: pd.DataFrame, scratch: Path, *, decision: Decision,
                  meta: dict, comparison: tuple[str, str, pd.DataFrame] | None = None,
                  formats: Sequence[str] = (), title_suffix: str = "") -> Report:
    """Figures are drawn in ``scratch`` and moved into place with the other files; the
    verdicts at ``decision`` (its four settings filled in).
    ``meta``: the experiment.json whose design decides the verdicts and adds its sections
    (:func:`ablations.results.stats.analyses.analysis_of`, :func:`ablations.results.report.
    designs.report_of`); settings that differ from those it recorded before the data label
    the table exploratory. A tuned ablation's tables other than its side-by-side section
    read its evaluation at the configuration given (results/stats/phases.py)."""
    name = str(trials["experiment"].iloc[0])
    all_trials = trials
    trials = evaluation_rows(all_trials)
    epochs = evaluation_rows(epochs, all_trials)
    predictions = evaluation_rows(predictions, all_trials)
    # own code's predictions without a regression's target and mean (a classifier's) stay in
    # predictions.parquet; the per-sample sections here (uncertainty, strata) need the two
    regression = REGRESSION_COLUMNS <= set(predictions.columns) and len(predictions) > 0
    if not regression:
        predictions = pd.DataFrame(columns=["experiment", "trial_name", "ablation", "seed",
                                            "sample_index", "target", "pred_mean", "pred_std"])
    analysis = analysis_of(meta)  # this dataset's
    design = report_of(analysis)
    reference, metric, alpha = decision.reference, decision.metric, decision.alpha
    ablation = analysis.verdicts(all_trials, decision)
    exploratory = ablation.attrs["exploratory"]
    note = verdict_note(ablation)
    ties = seed_tie_lines(trials, metric=str(ablation.attrs["metric"]),
                          reference=str(ablation.attrs["reference"]), epochs=epochs)
    how = analysis.design_note(alpha)  # a pilot look's, the rounds' design
    if how:
        note = f"{note} {how}"
    dropped = dropped_note(ablation.attrs.get("dropped_nan", []), metric)
    if dropped:
        note += f"\n{dropped}"
    if exploratory:
        note = f"{exploratory_note(exploratory)}\n{note}"
    uncertainty = uncertainty_table(predictions)
    pooled, mixed = one_draw(predictions, trials)
    ensemble = uncertainty_table(seed_ensemble(pooled)) if len(pooled) else pd.DataFrame()
    ensemble_note = ("Each test sample's predictions across seeds as an ensemble: mean of the "
                     "means, mixture variance.")
    if mixed:
        which = "any arm" if pooled.empty else ", ".join(mixed)
        ensemble_note += (f" Not shown for {which}: each seed drew its own data "
                          "(seed_sources has data), so a sample index names a different sample "
                          "per seed; hold the draw (--seed-sources init,order) for ensembles.")
    strata = stratified_errors(predictions, reference=reference) if len(predictions) \
        else pd.DataFrame()
    has_reference = len(predictions) and (predictions["ablation"] == reference).any()
    effects = stratified_effects(predictions, reference=reference, alpha=alpha) \
        if has_reference else pd.DataFrame(columns=["differs"])
    hurts = effects[effects["differs"].astype(bool)].drop(columns=["differs", "interaction_p"],
                                                          errors="ignore")
    figures_dir = scratch / FIGURES_DIR
    # own code's declared direction and unit, else the built-in model's
    declared = meta.get("metrics")
    measure = metric_of(metric, declared)
    unit = measure.unit
    forest = plots.forest_plot(ablation, figures_dir / "forest.png", metric=measure)
    curves = plots.learning_curves(epochs, figures_dir / "learning_curves.png", metric=metric_of(
        plots.curve_metric(epochs, metric), declared), reference=reference)
    heatmap = calibration = None
    if len(strata):
        first = next(s for s in strata["stratum"].unique())
        heatmap = (first, plots.stratum_heatmap(strata, figures_dir / "strata.png",
                                                stratum=first))
    curve = calibration_curve(predictions)
    if len(curve):
        calibration = plots.calibration_plot(curve, figures_dir / "calibration.png")

    variants = list(ablation["ablation"].astype(str))
    undecided = undecided_lines(ablation)  # the appendix's lines, one per undecided variant
    grids = strata_grids(effects, strata, reference=reference, variants=variants)
    sections = [
        Section("Verdicts (exploratory)" if exploratory else "Verdicts",
                "\n\n".join([*([exploratory_note(exploratory)] if exploratory else []),
                             *ties, short_verdict_note(ablation)]),
                verdict_view(ablation, metric=measure, alpha=alpha,
                             per_look=analysis.looks)),
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
        *design.outcome_sections(all_trials, figures_dir, decision),
        *([Section(comparison[0], comparison[1], comparison_view(
            comparison[2], metric=measure, alpha=alpha))] if comparison else []),
        *design.cost_sections(trials),
    ]
    sources = seed_variance_table(trials, metric=metric, alpha=alpha)
    if len(sources):  # only a run that crossed seed sources (--cross-seeds) has this table
        sections.append(Section("Seed variance by source", seed_variance_note(
            sources, metric=metric, alpha=alpha), seed_variance_view(
                sources, metric=measure, alpha=alpha)))
    if grids:
        sections.append(Section(
            "By stratum", f"Per stratum of the test data (numeric ones and the target in "
            f"quartile bins): each variant's difference of the MAE to `{reference}` in that "
            "stratum (km), with its "
            f"{1 - alpha:.0%} interval over seeds where there are two or more. {FLAG}: the "
            "effect in that cell differs from the variant's overall effect (Holm over the "
            f"variant's cells, α = {alpha:g}; listed under 'Where it hurts' in the appendix)."))
        for stratum, grid in grids.items():
            title = "target (km), in quartile bins" if stratum == "target_bin" else stratum
            sections.append(Section(title, table=grid, level=3))
    regression_sections = [
        Section("Uncertainty (single models)", "Gaussian NLL and CRPS (km), coverage of "
                "central intervals, sharpness (mean predicted std), spread-skill (Spearman of "
                "std with |error|). Models without a variance head have no row.",
                plain(uncertainty), collapsed=True),
        Section("Uncertainty (seed ensembles)", ensemble_note, plain(ensemble),
                collapsed=True),
        Section("Errors by stratum", "MAE, RMSE and bias (km) per stratum, and the MAE "
                f"difference to `{reference}` in the same stratum.", plain(strata),
                appendix=True),
        Section("Where it hurts", "Cells (a stratum level or target bin) where an ablation's "
                "effect on the absolute error differs from its overall effect: diff_mean, the "
                f"seed-paired difference to `{reference}` in the cell (km) with its "
                f"{1 - alpha:.0%} t interval; overall_diff, the same over all test samples; a "
                "one-sample t-test over seeds of (cell − overall difference), Holm over every "
                f"cell of that ablation, below {alpha:g}." + (
                    "" if len(hurts) else " No cell differs."), plain(hurts), appendix=True),
    ]
    sections += [
        *([Section("Metrics", "Each metric the code declares (its unit as declared): mean "
                   "and standard deviation over the ok seeds of each variant.",
                   declared_metrics_view(trials, meta["metrics"]))]
          if meta.get("metrics") else []),
        *([Section("Learning curves", figure=curves)] if curves is not None else []),
        *([Section(f"MAE by {heatmap[0]}", figure=heatmap[1])] if heatmap else []),
        *([Section("Calibration", "Observed coverage of central predictive intervals "
                   "against their nominal level.", figure=calibration)] if calibration else []),
        Section("Ablation table", f"{metric}: mean and {1 - alpha:.0%} t interval over seeds; "
                f"the paired difference to `{reference}` over the seeds both ran (t interval, "
                "paired t-test, Holm over the ablations, Cohen's d_z; a variant run under other "
                "seeds than the reference: Welch's t-test and Cohen's d). Trials that are not "
                "ok are excluded and counted.", ablation_view(ablation, metric=measure,
                                                              alpha=alpha), collapsed=True),
        *(regression_sections if regression else []),
    ]
    counts = trials["status"].value_counts()
    summary = (f"{int(counts.get(TrialStatus.OK, 0))} of {len(trials)} trials ok; "
               f"{len(variants)} variants against `{reference}` on {metric}"
               f"{f' ({unit})' if unit else ''}, margin {margin_text(ablation.attrs, unit)}, "
               f"α = {alpha:g}.")
    check = baseline_check(trials, epochs, reference=reference)
    if check is not None:  # above the verdicts, as the run's summary prints it
        summary += f" {check.line()}"
    title = f"Ablation report: {name}{title_suffix}"
    tables = write_paper_files(directory, _write_file, meta=meta, trials=all_trials,
                               ablation=ablation, formats=formats,
                               baseline_line=check.line() if check is not None else None)
    plots.copy_figures([s.figure for s in sections if s.figure is not None],
                       join(directory, FIGURES_DIR), _write_file)
    markdown_path = _write_file(join(directory, "report.md"), markdown_page(
        title, summary, sections, FIGURES_DIR).encode())
    html_path = _write_file(join(directory, "report.html"),
                            html_page(title, summary, sections).encode())
    return Report(markdown_path, html_path, ablation, "\n\n".join([*ties, note]), tables)


def _write_file(path: str, content: bytes) -> Path | str:
    """Write atomically; a Path for a local file, the URI otherwise."""
    atomic_write(path, lambda handle: handle.write(content))
    return path if is_uri(path) else Path(path)
