"""The report's sections for two kinds of run (:mod:`ablations.results.report.build` places them): a
tuned ablation's verdicts side by side (``--tune-each``) and a factorial design's effects with the
interaction plot (``--design factorial``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pandas as pd

from ablations.results.report import plots
from ablations.results.report.page import Section
from ablations.results.stats.decisions import factorial_effects_of, tuned_comparison_of
from ablations.results.stats.factorial import effects_view, factorial_note, interaction_means
from ablations.results.stats.factorial_design import FactorialDesign
from ablations.results.stats.phases import has_tuning


def tuned_section(trials: pd.DataFrame, meta: dict[str, Any], *, reference: str, metric: str,
                  margin: str | float, alpha: float) -> Optional[Section]:
    """A tuned ablation's verdicts at the configuration given and at each arm's own best, side
    by side (:func:`ablations.results.stats.decisions.tuned_comparison_of`; None for an experiment
    without ``--tune-each``)."""
    if not has_tuning(trials):
        return None
    keys = (meta.get("tuned") or {}).get("keys", [])
    try:
        table = tuned_comparison_of(trials, {**meta, "tuned": {"keys": keys}},
                                    reference=reference, metric=metric, margin=margin,
                                    alpha=alpha)
    except ValueError as exc:
        return Section("Tuned ablations", f"No tuned comparison: {exc}")
    changed = table.loc[table["changed"], "ablation"].tolist()
    tuning = trials[trials["phase"] == "tuning"]
    text = (f"Every arm tuned over {', '.join(keys)} with the same budget "
            f"({tuning.groupby('ablation').size().max()} search trials per arm, "
            f"{tuning['cpu_hours'].sum():.3f} CPU-hours in all), on the validation metric at a "
            "tuning seed no evaluation used; then evaluated at its own best at the same seeds. "
            "Each evaluation is compared with the reference evaluated the same way, and is a "
            "family of its own. The other sections read the evaluation at the configuration "
            "given. Verdicts that change: " + (", ".join(changed) if changed else "none") + ".")
    view = pd.DataFrame({
        "Variant": table["ablation"],
        "At the given configuration": [f"{m:.3f} {v}" for m, v in
                                       zip(table["mean_given"], table["verdict_given"])],
        "At its own best": [f"{m:.3f} {v}" if pd.notna(m) else "-" for m, v in
                            zip(table["mean_tuned"], table["verdict_tuned"])],
        **{f"Best {key}": [f"{v:.3g}" if isinstance(v, float) else str(v)
                           for v in table[f"best_{key}"]] for key in keys},
        "Changed": ["yes" if c else "" for c in table["changed"]],
    })
    return Section("Tuned ablations", text, view)


def factorial_sections(trials: pd.DataFrame, meta: dict[str, Any], figures_dir: Path, *,
                       metric: str, margin: str | float, alpha: float) -> list[Section]:
    """The effects of a factorial design (:func:`ablations.results.stats.decisions.
    factorial_effects_of`) with their verdicts, and the interaction plot; none for an
    experiment without a factorial design."""
    if not meta.get("factorial"):
        return []
    design = FactorialDesign.from_dict(meta["factorial"])
    try:
        effects = factorial_effects_of(trials, meta, metric=metric, margin=margin, alpha=alpha)
    except ValueError as exc:
        return [Section("Factorial effects", f"No factorial effects: {exc}")]
    figure = plots.interaction_plot(interaction_means(trials, design, metric=metric), effects,
                                    figures_dir / "interactions.png", metric=metric)
    text = (f"{factorial_note(effects)} Factors: {design.legend()}."
            + (f" Generators {', '.join(design.generators)}; defining relation "
               f"{design.defining_relation()}; an effect is estimated together with its "
               "aliases (higher-order interactions assumed negligible)."
               if design.generators else "")
            + " The table above compares each cell with the reference cell.")
    return [Section("Factorial effects", text, effects_view(effects)),
            Section("Interactions", "Mean of the metric at each pair of levels of two "
                    "factors, averaged over the other factors and the seeds; parallel lines "
                    "mean additive effects.", figure=figure, level=3)]
