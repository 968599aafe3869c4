"""The report of an experiment over several datasets (docs/datasets.md).

The top report.md / report.html lead with the verdicts across the datasets
(:mod:`ablations.results.stats.datasets`), then a forest plot per ablation (a row per dataset and
the pooled ratio), the critical-difference diagram where there are five or more datasets, and each
dataset's verdict table. Each dataset also gets the full single-dataset report (learning
curves, strata, calibration, the paper's tables) in ``datasets/<name>/``. The across-dataset
table is written as ``across_datasets.parquet`` beside trials.parquet; the methods paragraph
of the whole experiment and, for each format asked, the across-dataset table for a paper
(``across_table.*``) beside the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.config.comparison import Decision
from ablations.config.metrics import Metric
from ablations.config.statuses import TrialStatus
from ablations.results.io.directions import metric_of
from ablations.results.io.files import join, write_parquet_atomic
from ablations.results.report.dataset_tables import across_view
from ablations.results.report.methods_files import write_across_paper_files
from ablations.results.report.page import FIGURES_DIR, Section
from ablations.results.report.tables import verdict_view
from ablations.results.stats.baseline_check import dataset_baseline_checks
from ablations.results.stats.dataset_rows import by_dataset
from ablations.results.stats.datasets import (
    FULL_ALPHA_NOTE,
    Ranks,
    across_note,
    dataset_effects,
    rank_comparison,
)
from ablations.results.stats.analyses import analysis_of, one_below_the_other
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.verdicts import margin_text

ACROSS_FILE = "across_datasets.parquet"
DATASETS_DIR = "datasets"  # each dataset's own report: datasets/<name>/report.md


def write_across(directory: str | Path, across: pd.DataFrame) -> str:
    """``across_datasets.parquet`` in the experiment's folder, atomically."""
    path = join(directory, ACROSS_FILE)
    write_parquet_atomic(across.reset_index(drop=True), path)
    return path


def write_datasets_report(directory: str | Path, trials: pd.DataFrame, epochs: pd.DataFrame,
                          predictions: pd.DataFrame, scratch: Path, *, decision: Decision,
                          meta: dict, formats: Sequence[str], write_one: Callable[..., Any],
                          write_file: Callable[[str, bytes], Any], report_type: type) -> Any:
    """Each dataset's report (``write_one``: ablations.results.report.build's single-dataset writer)
    in ``datasets/<name>/``, then the top report across them. Returns ``report_type`` (build's
    Report) with the verdicts of every dataset, one below the other. The metric's direction
    and unit: those ``meta`` declares (own code), else the built-in model's."""
    # matplotlib where figures are drawn: a run's driver imports this module for write_across
    from ablations.results.report.dataset_plots import (
        critical_difference_diagram,
        dataset_forest_plots,
    )
    from ablations.results.report.page_files import write_pages

    reference, metric, alpha = decision.reference, decision.metric, decision.alpha
    measure = metric_of(metric, meta.get("metrics"))
    per_dataset, problems = _dataset_reports(directory, trials, epochs, predictions, scratch,
                                             decision=decision, meta=meta, formats=formats,
                                             write_one=write_one)
    across = analysis_of(meta, trials).across(trials, per_dataset, decision)
    write_across(directory, across)
    figures_dir = scratch / FIGURES_DIR
    effects = dataset_effects(trials, reference=reference, metric=metric)
    forests = dataset_forest_plots(effects, across, figures_dir, alpha=alpha, metric=metric)
    ranks = rank_comparison(evaluation_rows(trials), metric=measure, alpha=alpha)
    names = list(by_dataset(trials))
    sections = _across_sections(across, forests, reference=reference, alpha=alpha)
    if ranks is not None:
        sections.append(_ranks_section(ranks, critical_difference_diagram(
            ranks, figures_dir / "critical_difference.png"), metric=metric, alpha=alpha))
    sections += _dataset_sections(names, per_dataset, problems, measure=measure, alpha=alpha)
    verdicts = one_below_the_other(per_dataset)
    checks = dataset_baseline_checks(evaluation_rows(trials), epochs, reference=reference)
    checked = " ".join(checks.line().splitlines()) if checks is not None else None
    tables = write_across_paper_files(directory, write_file, meta=meta, trials=trials,
                                      verdicts=verdicts, across=across, formats=formats,
                                      baseline_line=checked)
    title = f"Ablation report: {trials['experiment'].iloc[0]}, across datasets"
    markdown_path, html_path = write_pages(
        directory, title, _summary(trials, names, across, decision, checked), sections,
        write_file)
    return report_type(markdown_path, html_path, verdicts, across_note(across), tables, across)


def _dataset_reports(directory: str | Path, trials: pd.DataFrame, epochs: pd.DataFrame,
                     predictions: pd.DataFrame, scratch: Path, *, decision: Decision,
                     meta: dict, formats: Sequence[str], write_one: Callable[..., Any]
                     ) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Each dataset's own report in ``datasets/<name>/``: the verdicts of those that have
    them, and why each other one has none; a ValueError where no dataset has verdicts."""
    per_dataset: dict[str, pd.DataFrame] = {}
    problems: dict[str, str] = {}
    for name, rows in by_dataset(trials).items():
        names = set(rows["trial_name"])
        try:
            report = write_one(join(directory, DATASETS_DIR, name), rows,
                               epochs[epochs["trial_name"].isin(names)],
                               predictions[predictions["trial_name"].isin(names)],
                               scratch / name, meta=meta, formats=formats,
                               title_suffix=f", dataset {name}", decision=decision)
            per_dataset[name] = report.ablation
        except ValueError as exc:  # e.g. no ok trial of the reference on this dataset
            problems[name] = str(exc)
    if not per_dataset:
        raise ValueError("no dataset has verdicts: " + "; ".join(
            f"{name}: {problem}" for name, problem in problems.items()))
    return per_dataset, problems


def _across_sections(across: pd.DataFrame, forests: list[Path], *, reference: str,
                     alpha: float) -> list[Section]:
    """The verdicts across the datasets, then each ablation's forest plot over them."""
    return [
        Section("Verdicts across the datasets", across_note(across), across_view(across)),
        Section("Differences per dataset", (
            f"Per ablation: each dataset's ratio to `{reference}` − 1 (%) with its "
            f"{1 - alpha:.0%} t interval over the seed pairs, the pooled ratio (diamond) with "
            "its interval, and the prediction interval (thin line); "
            "the shaded band is the margin.")),
        *(Section(str(ablation), figure=path, level=3)
          for ablation, path in zip(across["ablation"], forests)),
    ]


def _ranks_section(ranks: Ranks, diagram: Path, *, metric: str, alpha: float) -> Section:
    """The arms' ranks over the datasets with their critical-difference ``diagram``."""
    return Section(
        "Ranks across the datasets",
        f"Every arm ranked on each of the {len(ranks.scores)} datasets by its median "
        f"{metric} over seeds (a diverged seed the worst; 1 = best). Friedman's test p = "
        f"{ranks.friedman_p:.3g}; arms joined by a bar are not told apart by Nemenyi's "
        f"test (critical difference {ranks.critical_difference:.2f} at α = {alpha:g}; "
        "Demšar 2006).", figure=diagram)


def _dataset_sections(names: list[str], per_dataset: dict[str, pd.DataFrame],
                      problems: dict[str, str], *, measure: Metric,
                      alpha: float) -> list[Section]:
    """Each dataset's verdicts on its own, or why it has none."""
    sections = []
    for name in names:
        if name in per_dataset:
            table = per_dataset[name]
            sections.append(Section(
                f"Dataset {name}",
                f"Its verdicts on its own (margin {margin_text(table.attrs)}); its full report: "
                f"{DATASETS_DIR}/{name}/report.html. {FULL_ALPHA_NOTE}",
                verdict_view(table, metric=measure, alpha=alpha), level=3))
        else:
            sections.append(Section(f"Dataset {name}", f"No verdicts: {problems[name]}",
                                    level=3))
    return sections


def _summary(trials: pd.DataFrame, names: list[str], across: pd.DataFrame,
             decision: Decision, checked: Optional[str]) -> str:
    """The line under the title: the trials ok on the datasets, the variants against the
    reference, the margin and α, then each dataset's baseline check."""
    counts = trials["status"].value_counts()
    summary = (f"{int(counts.get(TrialStatus.OK, 0))} of {len(trials)} trials ok on "
               f"{len(names)} datasets ({', '.join(names)}); {len(across)} variants against "
               f"`{decision.reference}` on {decision.metric}, margin "
               f"±{100 * across.attrs['margin']:.3g}% of the reference's mean, "
               f"α = {decision.alpha:g}.")
    if checked:
        summary += " " + checked
    return summary
