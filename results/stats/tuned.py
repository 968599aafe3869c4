"""A tuned ablation's verdicts side by side (``--tune-each``, docs/tuned.md): each arm at the
configuration given and at its own best, each evaluation against the reference evaluated the
same way (the phases: :mod:`ablations.results.stats.phases`).
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.stats.phases import EVALUATION, TUNED, has_tuning
from ablations.results.stats.verdicts import MetricLike, metric_of, verdict_table


def side_by_side(trials: pd.DataFrame, *, keys: Sequence[str] = (),
                 reference: str = DEFAULT_REFERENCE, metric: MetricLike = DEFAULT_METRIC,
                 margin: Any = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA,
                 max_failure_rate: float | None = None) -> pd.DataFrame:
    """Per arm: its verdict at the configuration given (the baseline's hyperparameters) and
    at its own best, each against the reference evaluated the same way, with the means and
    whether the verdict changed. Each evaluation is its own family (Holm over its arms).
    ``keys``: the tuned keys (experiment.json's ``tuned``), shown with each arm's best value.
    ``metric``: a :class:`~ablations.config.metrics.Metric` or a built-in column's name, as
    :func:`~ablations.results.stats.verdicts.verdict_table` takes it.

    Columns: ``ablation``; ``mean_given``, ``verdict_given``, ``equivalence_bound_given``;
    ``mean_tuned``, ``verdict_tuned``, ``equivalence_bound_tuned``; ``changed``; and each
    tuned key's best value (``best_<key>``, from the ``tuned`` trials' configuration).
    Raises ValueError when the experiment has no ``tuned`` trials."""
    if not has_tuning(trials):
        raise ValueError("no trial of phase 'tuned' (a --tune-each experiment has them)")
    given = trials[trials["phase"] == EVALUATION]
    tuned = trials[trials["phase"] == TUNED].assign(phase=EVALUATION)
    measure = metric_of(metric)
    metric = measure.name
    tables = {}
    for label, frame in (("given", given), ("tuned", tuned)):
        table = verdict_table(frame, reference=reference, metric=measure, margin=margin,
                              alpha=alpha, max_failure_rate=max_failure_rate)
        tables[label] = table.set_index("ablation")[
            [f"{metric}_mean", "verdict", "equivalence_bound_holm"]].rename(columns={
                f"{metric}_mean": f"mean_{label}", "verdict": f"verdict_{label}",
                "equivalence_bound_holm": f"equivalence_bound_{label}"})
        relative = table.attrs.get("relative")
    out = tables["given"].join(tables["tuned"], how="outer")
    order = list(dict.fromkeys(given["ablation"]))
    out = out.reindex([a for a in order if a in out.index]).reset_index()
    out["changed"] = out["verdict_given"] != out["verdict_tuned"]
    out.loc[out["ablation"] == reference, "changed"] = False
    # every tuned trial of an arm has its best configuration (a key no trial has: empty)
    best = tuned.reindex(columns=["ablation", *keys]).groupby("ablation").first()
    for key in keys:
        out[f"best_{key}"] = out["ablation"].map(best[key])
    out.attrs.update(metric=metric, reference=reference, relative=relative, keys=list(keys))
    return out


def side_by_side_text(table: pd.DataFrame) -> str:
    """The console's and the report's text of :func:`side_by_side`."""
    relative, keys = table.attrs.get("relative"), table.attrs.get("keys", [])

    def bound(value: Any) -> str:
        if pd.isna(value):
            return "-"
        return f"{value:.1%}" if relative else f"{value:.3f}"

    def shown(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        return "-" if value is None or (not isinstance(value, str) and pd.isna(value)) \
            else str(value)

    head = (f"{'':<24} {'at the given configuration':<32} {'each at its own best':<32} "
            + " ".join(f"{'best ' + key:<12}" for key in keys))
    lines = [f"Tuned ablations ({table.attrs.get('metric')}; each evaluation a family of its "
             "own, against the reference evaluated the same way):", head]
    for _, row in table.iterrows():
        given = (f"{row['mean_given']:.3f} {row['verdict_given']} "
                 f"({bound(row['equivalence_bound_given'])})")
        tuned = (f"{row['mean_tuned']:.3f} {row['verdict_tuned']} "
                 f"({bound(row['equivalence_bound_tuned'])})"
                 if pd.notna(row.get("mean_tuned")) else "-")
        mark = "  <- changed" if row["changed"] else ""
        values = " ".join(f"{shown(row.get(f'best_{key}')):<12}" for key in keys)
        lines.append(f"  {row['ablation']:<22} {given:<32} {tuned:<32} {values}{mark}")
    changed = table.loc[table["changed"], "ablation"].tolist()
    lines.append("Verdicts that change when every arm is tuned: "
                 + (", ".join(changed) if changed else "none"))
    return "\n".join(lines)
