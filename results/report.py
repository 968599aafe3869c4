"""``python run_ablations.py report EXPERIMENT_DIR``: report.md and a self-contained report.html.

Both hold the ablation table, the uncertainty tables (single models and seed ensembles), the
per-stratum errors and four figures (forest plot, stratum heatmap, calibration curves, learning
curves); the HTML embeds the figures as base64 PNGs, so it is one file to send around.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from results import plots
from results.analysis import (
    ablation_table,
    calibration_curve,
    load_experiments,
    seed_ensemble,
    stratified_errors,
    uncertainty_table,
)

FIGURES_DIR = "report_files"


@dataclass
class Report:
    markdown: Path
    html: Path
    ablation: pd.DataFrame


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-style markdown table (no tabulate dependency)."""
    def cell(value) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if np.isnan(value) else f"{value:.{digits}g}"
        return str(value)

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def write_report(directory: str | Path, *, reference: str = "baseline",
                 metric: str = "test_mae") -> Report:
    """Analyse the experiment in ``directory`` and write report.md, report.html and the PNGs."""
    root = Path(directory)
    tables = load_experiments(root)
    trials, epochs, predictions = tables["trials"], tables["epochs"], tables["predictions"]
    name = str(trials["experiment"].iloc[0])
    ablation = ablation_table(trials, metric=metric, reference=reference)
    uncertainty = uncertainty_table(predictions)
    ensemble = uncertainty_table(seed_ensemble(predictions)) if len(predictions) else pd.DataFrame()
    strata = stratified_errors(predictions, reference=reference) if len(predictions) \
        else pd.DataFrame()
    figures_dir = root / FIGURES_DIR
    figures = {
        "Differences to the reference": plots.forest_plot(
            ablation, figures_dir / "forest.png", metric=metric),
        "Learning curves": plots.learning_curves(epochs, figures_dir / "learning_curves.png"),
    }
    if len(strata):
        first = next(s for s in strata["stratum"].unique())
        figures[f"MAE by {first}"] = plots.stratum_heatmap(strata, figures_dir / "strata.png",
                                                            stratum=first)
    curve = calibration_curve(predictions)
    if len(curve):
        figures["Calibration"] = plots.calibration_plot(curve, figures_dir / "calibration.png")

    shown = ablation[["ablation", "n_ok", "n_excluded", f"{metric}_mean", f"{metric}_ci_low",
                      f"{metric}_ci_high", "test", "diff_mean", "diff_ci_low",
                      "diff_ci_high", "p_value", "p_holm", "effect_size"]]
    sections = [
        ("Ablation table", f"{metric} (km): mean and 95% t interval over seeds; paired "
         f"difference to `{reference}` over the seeds both ran (t interval, paired t-test, "
         "Holm-adjusted over the ablations, Cohen's d_z; a variant run under other seeds than "
         "the reference: Welch's t-test and Cohen's d). Failed trials are excluded and "
         "counted in n_excluded.", shown),
        ("Uncertainty (single models)", "Gaussian NLL and CRPS (km), coverage of central "
         "intervals, sharpness (mean predicted std), spread-skill (Spearman of std with |error|). "
         "Models without a variance head have no row.", uncertainty),
        ("Uncertainty (seed ensembles)", "Each test sample's predictions across seeds as an "
         "ensemble: mean of the means, mixture variance.", ensemble),
        ("Errors by stratum", "MAE, RMSE and bias (km) per stratum, and the MAE difference to "
         f"`{reference}` in the same stratum.", strata),
    ]
    md = [f"# Ablation report: {name}", ""]
    for title, text, frame in sections:
        md += [f"## {title}", "", text, "", markdown_table(frame) if len(frame) else "(none)", ""]
    md += ["## Figures", ""]
    for title, path in figures.items():
        md += [f"### {title}", "", f"![{title}]({FIGURES_DIR}/{path.name})", ""]
    markdown_path = root / "report.md"
    markdown_path.write_text("\n".join(md))

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Ablation report: "
             f"{html.escape(name)}</title><style>body{{font-family:sans-serif;max-width:1100px;"
             "margin:auto}} table{border-collapse:collapse;font-size:12px} td,th{border:1px "
             "solid #ccc;padding:2px 6px}</style></head><body>",
             f"<h1>Ablation report: {html.escape(name)}</h1>"]
    for title, text, frame in sections:
        parts.append(f"<h2>{html.escape(title)}</h2><p>{html.escape(text)}</p>")
        parts.append(frame.to_html(index=False, float_format=lambda v: f"{v:.4g}",
                                   na_rep="") if len(frame) else "<p>(none)</p>")
    for title, path in figures.items():
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<h2>{html.escape(title)}</h2>"
                     f"<img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    html_path = root / "report.html"
    html_path.write_text("\n".join(parts))
    return Report(markdown_path, html_path, ablation)
