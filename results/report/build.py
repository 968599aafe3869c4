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
from ablations.config.metrics import Metric
from ablations.config.statuses import TrialStatus
from ablations.results.io.directions import metric_of
from ablations.results.io.files import (
    TRIALS_FILE,
    atomic_write,
    first_line,
    is_uri,
    join,
    read_metadata,
)
from ablations.results.report import plots
from ablations.results.report.designs import report_of
from ablations.results.report.figure_files import FIGURES, figure_formats
from ablations.results.report.folder import NotAnExperimentError, check_experiment
from ablations.results.report.page import FIGURES_DIR, Section
from ablations.results.report.page_files import write_pages
from ablations.results.report.paper_files import write_paper_files
from ablations.results.report.sections import (
    Figures,
    ablation_section,
    figure_sections,
    metrics_sections,
    regression_sections,
    seed_variance_sections,
    stratum_sections,
    stratum_tables,
    verdict_sections,
)
from ablations.results.report.tables import comparison_view
from ablations.results.stats.analyses import Analysis, analysis_of
from ablations.results.stats.analysis import (
    calibration_curve,
    dropped_note,
    load_experiments,
    verdict_note,
)
from ablations.results.stats.baseline_check import baseline_check
from ablations.results.stats.compare import compare_experiments, compare_note
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.planned import exploratory_note
from ablations.results.stats.seed_ties import seed_tie_lines
from ablations.results.stats.verdicts import margin_text


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
    (:func:`ablations.results.report.figure_files.figure_formats`).

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
    if figures not in FIGURES:
        raise ValueError(f"figures {figures!r}: one of {', '.join(FIGURES)}")
    check_experiment(directory)
    meta = read_metadata(directory) or {}  # a damaged one is refused, as --resume refuses it
    # each setting not given: the one fixed before the data (results/stats/planned.py)
    decision = analysis_of(meta).decision(Decision(reference=reference, metric=metric,
                                                   margin=margin, alpha=alpha))
    trials, epochs, predictions = _read_tables(directory)
    _refuse_unusable(directory, trials, meta, decision)
    design = report_of(analysis_of(meta, trials))  # over several datasets: each one's
    design.refuse(directory, decision.margin, compare_with)
    comparison = None if compare_with is None else _comparison(compare_with, trials, meta,
                                                                decision)
    with tempfile.TemporaryDirectory(prefix="report-") as scratch, \
            figure_formats(figures):
        return design.write(directory, trials, epochs, predictions, Path(scratch),
                            write_one=_write_report, write_file=_write_file,
                            report_type=Report, decision=decision, meta=meta,
                            comparison=comparison, formats=formats)


def _read_tables(directory: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The experiment's trials, epochs and predictions; a file that cannot be read is
    :class:`NotAnExperimentError`."""
    try:
        tables = load_experiments(directory)
    except (OSError, pa.ArrowException) as exc:
        raise NotAnExperimentError(f"{directory}: cannot be read ({first_line(exc)})") from None
    return tables["trials"], tables["epochs"], tables["predictions"]


def _refuse_unusable(directory: str | Path, trials: pd.DataFrame, meta: dict,
                     decision: Decision) -> None:
    """A ValueError where ``trials`` give no verdicts at ``decision``: no trials, a reference
    that is not a variant, a metric no ok trial measured, no ok trial, or none of the
    reference."""
    reference, metric = decision.reference, decision.metric
    if not len(trials):
        raise ValueError(f"{join(directory, TRIALS_FILE)}: no trials")
    variants = list(dict.fromkeys(trials["ablation"].astype(str)))
    if reference not in variants:
        raise ValueError(f"reference {reference!r} is not a variant of this experiment "
                         f"(variants: {', '.join(variants)}); pass --reference")
    ok = trials["status"] == TrialStatus.OK
    if ok.any() and not _measured(trials, ok, metric):
        raise ValueError(_unmeasured(trials, ok, meta, metric))
    if not ok.any():
        counts = trials["status"].value_counts().to_dict()
        raise ValueError(f"{directory}: no trial finished ok "
                         f"({', '.join(f'{n} {s}' for s, n in counts.items())}); nothing to "
                         "compare (trials.parquet has each trial's error)")
    if not (ok & (trials["ablation"] == reference)).any():
        raise ValueError(f"reference {reference!r} has no ok trial; pass another --reference "
                         f"(variants: {', '.join(variants)})")


def _measured(trials: pd.DataFrame, ok: pd.Series, column: str) -> bool:
    """Whether ``column`` is a number in some ok trial (own code's trials hold the built-in
    model's columns as NaN)."""
    return column in trials.columns and pd.api.types.is_numeric_dtype(trials[column]) \
        and bool(trials.loc[ok, column].notna().any())


def _unmeasured(trials: pd.DataFrame, ok: pd.Series, meta: dict, metric: str) -> str:
    """Why ``metric`` gives no verdicts, with the metrics to name instead: those its own code
    declared, else the built-in model's."""
    named = [*(meta.get("metrics") or {}), "test_mae", "test_rmse", "val_mae", "test_nll"]
    usable = [column for column in dict.fromkeys(named) if _measured(trials, ok, column)]
    numeric = metric in trials.columns and pd.api.types.is_numeric_dtype(trials[metric])
    problem = "has no value in any ok trial" if numeric else "is not a numeric column"
    return (f"metric {metric!r} {problem} of {TRIALS_FILE} "
            f"(e.g. {', '.join(usable[:4]) or DEFAULT_METRIC})")


def _comparison(compare_with: str | Path, trials: pd.DataFrame, meta: dict,
                decision: Decision) -> tuple[str, str, pd.DataFrame]:
    """The section comparing the experiment (B) with ``compare_with`` (A): its title, its
    note and its table."""
    table = compare_experiments(compare_with, trials,
                                metric=metric_of(decision.metric, meta.get("metrics")),
                                margin=decision.margin, alpha=decision.alpha,
                                reference=decision.reference)
    other = Path(str(compare_with).rstrip("/")).name
    return (f"Compared with {other}", compare_note(
        table, a=other, b=str(trials["experiment"].iloc[0])), table[[
            "ablation", "n_a", "n_b", "n_pairs", "a_mean", "b_mean", "diff_mean",
            "tost_ci_low", "tost_ci_high", "p_holm", "p_tost_holm", "verdict"]])


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
    rows = _evaluation(trials, epochs, predictions)
    analysis = analysis_of(meta)  # this dataset's
    design = report_of(analysis)
    reference, alpha = decision.reference, decision.alpha
    ablation = analysis.verdicts(rows.all_trials, decision)
    ties = seed_tie_lines(rows.trials, metric=str(ablation.attrs["metric"]),
                          reference=str(ablation.attrs["reference"]), epochs=rows.epochs)
    note = _decided_note(analysis, ablation, decision)
    strata = stratum_tables(rows.predictions, reference=reference, alpha=alpha)
    figures_dir = scratch / FIGURES_DIR
    # own code's declared direction and unit, else the built-in model's
    measure = metric_of(decision.metric, meta.get("metrics"))
    figures = _draw_figures(rows, ablation, strata.errors, figures_dir, measure=measure,
                            meta=meta, decision=decision)
    sections = [
        *verdict_sections(ablation, ties, note, figures.forest, design=design,
                          looks=analysis.looks, measure=measure, alpha=alpha),
        *design.outcome_sections(rows.all_trials, figures_dir, decision),
        *([Section(comparison[0], comparison[1], comparison_view(
            comparison[2], metric=measure, alpha=alpha))] if comparison else []),
        *design.cost_sections(rows.trials),
        *seed_variance_sections(rows.trials, decision=decision, measure=measure),
        *stratum_sections(strata, ablation, reference=reference, alpha=alpha),
        *metrics_sections(rows.trials, meta),
        *figure_sections(figures),
        ablation_section(ablation, measure=measure, decision=decision),
        *(regression_sections(rows.predictions, rows.trials, strata, reference=reference,
                              alpha=alpha)
          if rows.regression else []),
    ]
    check = baseline_check(rows.trials, rows.epochs, reference=reference)
    baseline = check.line() if check is not None else None
    tables = write_paper_files(directory, _write_file, meta=meta, trials=rows.all_trials,
                               ablation=ablation, formats=formats, baseline_line=baseline)
    title = f"Ablation report: {str(trials['experiment'].iloc[0])}{title_suffix}"
    markdown_path, html_path = write_pages(
        directory, title, _summary(rows.trials, ablation, decision, measure.unit, baseline),
        sections, _write_file)
    return Report(markdown_path, html_path, ablation, "\n\n".join([*ties, note]), tables)


@dataclass
class _Rows:
    """What one report reads: every trial (the verdicts' rows) and the evaluation's trials,
    epochs and predictions (a tuned ablation's at the configuration given)."""
    all_trials: pd.DataFrame
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame  # a regression's, else none (the columns alone)
    regression: bool  # the predictions have a regression's target and mean


def _evaluation(trials: pd.DataFrame, epochs: pd.DataFrame,
                predictions: pd.DataFrame) -> _Rows:
    """The evaluation's rows of the three tables (results/stats/phases.py)."""
    epochs = evaluation_rows(epochs, trials)
    predictions = evaluation_rows(predictions, trials)
    # own code's predictions without a regression's target and mean (a classifier's) stay in
    # predictions.parquet; the per-sample sections here (uncertainty, strata) need the two
    regression = REGRESSION_COLUMNS <= set(predictions.columns) and len(predictions) > 0
    if not regression:
        predictions = pd.DataFrame(columns=["experiment", "trial_name", "ablation", "seed",
                                            "sample_index", "target", "pred_mean", "pred_std"])
    return _Rows(trials, evaluation_rows(trials), epochs, predictions, regression)


def _decided_note(analysis: Analysis, ablation: pd.DataFrame, decision: Decision) -> str:
    """What the verdicts mean, with the design's note and the trials left out for a NaN
    metric; settings other than those recorded first, as exploratory."""
    note = verdict_note(ablation)
    how = analysis.design_note(decision.alpha)  # a pilot look's, the rounds' design
    if how:
        note = f"{note} {how}"
    dropped = dropped_note(ablation.attrs.get("dropped_nan", []), decision.metric)
    if dropped:
        note += f"\n{dropped}"
    exploratory = ablation.attrs["exploratory"]
    if exploratory:
        note = f"{exploratory_note(exploratory)}\n{note}"
    return note


def _draw_figures(rows: _Rows, ablation: pd.DataFrame, strata: pd.DataFrame, folder: Path, *,
                  measure: Metric, meta: dict, decision: Decision) -> Figures:
    """The forest plot, the learning curves, the first stratum's heatmap and the
    calibration, drawn into ``folder``."""
    forest = plots.forest_plot(ablation, folder / "forest.png", metric=measure)
    curves = plots.learning_curves(rows.epochs, folder / "learning_curves.png", metric=metric_of(
        plots.curve_metric(rows.epochs, decision.metric), meta.get("metrics")),
        reference=decision.reference)
    heatmap = calibration = None
    if len(strata):
        first = next(s for s in strata["stratum"].unique())
        heatmap = (first, plots.stratum_heatmap(strata, folder / "strata.png", stratum=first))
    curve = calibration_curve(rows.predictions)
    if len(curve):
        calibration = plots.calibration_plot(curve, folder / "calibration.png")
    return Figures(forest, curves, heatmap, calibration)


def _summary(trials: pd.DataFrame, ablation: pd.DataFrame, decision: Decision, unit: str,
             baseline: Optional[str]) -> str:
    """The line under the title: the trials ok, the variants against the reference on the
    metric, the margin and α, then the baseline check (above the verdicts, as the run's
    summary prints it)."""
    counts = trials["status"].value_counts()
    summary = (f"{int(counts.get(TrialStatus.OK, 0))} of {len(trials)} trials ok; "
               f"{len(ablation)} variants against `{decision.reference}` on {decision.metric}"
               f"{f' ({unit})' if unit else ''}, margin {margin_text(ablation.attrs, unit)}, "
               f"α = {decision.alpha:g}.")
    if baseline is not None:
        summary += f" {baseline}"
    return summary


def _write_file(path: str, content: bytes) -> Path | str:
    """Write atomically; a Path for a local file, the URI otherwise."""
    atomic_write(path, lambda handle: handle.write(content))
    return path if is_uri(path) else Path(path)
