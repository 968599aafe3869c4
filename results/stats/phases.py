"""The phases of an experiment's trials (trials.parquet's ``phase``) and the tuned comparison.

A plain run's trials are all ``evaluation``; a search space's are ``search``. A tuned ablation
(``--tune-each``, docs/tuned.md) has three: ``evaluation`` (the table at the configuration
given), ``tuning`` (every arm's search) and ``tuned`` (every arm at its own best). Every table
that compares arms (verdicts, strata, uncertainty, ``compare``) reads one evaluation at a time:
:func:`evaluation_rows` keeps the ``evaluation`` trials where an experiment has others, and
:func:`side_by_side` puts the two evaluations' verdicts next to each other.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pandas as pd

EVALUATION, TUNING, TUNED = "evaluation", "tuning", "tuned"


def evaluation_rows(frame: pd.DataFrame, trials: Optional[pd.DataFrame] = None,
                    phase: str = EVALUATION) -> pd.DataFrame:
    """``frame``'s rows of the ``phase`` evaluation when the experiment has trials of other
    phases besides (a tuned ablation), else ``frame`` as it is. ``trials``: the trials table
    that says each trial's phase, for a frame without the column (epochs, predictions)."""
    source = frame if trials is None else trials
    if "phase" not in source or source.empty:
        return frame
    phases = set(source["phase"].dropna())
    if phases <= {EVALUATION} or phase not in phases:
        return frame
    keep = source["phase"] == phase
    if trials is None:
        return frame[keep.to_numpy()].reset_index(drop=True)
    names = set(trials.loc[keep, "trial_name"])
    return frame[frame["trial_name"].isin(names)].reset_index(drop=True)


def has_tuning(trials: pd.DataFrame) -> bool:
    return "phase" in trials and bool((trials["phase"] == TUNED).any())


def side_by_side(trials: pd.DataFrame, *, keys: Sequence[str] = (),
                 reference: str = "baseline", metric: str = "test_mae", margin: Any = "5%",
                 alpha: float = 0.05) -> pd.DataFrame:
    """Per arm: its verdict at the configuration given (the baseline's hyperparameters) and
    at its own best, each against the reference evaluated the same way, with the means and
    whether the verdict changed. Each evaluation is its own family (Holm over its arms).
    ``keys``: the tuned keys (experiment.json's ``tuned``), shown with each arm's best value.

    Columns: ``ablation``; ``mean_given``, ``verdict_given``, ``equivalence_bound_given``;
    ``mean_tuned``, ``verdict_tuned``, ``equivalence_bound_tuned``; ``changed``; and each
    tuned key's best value (``best_<key>``, from the ``tuned`` trials' configuration).
    Raises ValueError when the experiment has no ``tuned`` trials."""
    from results.stats.verdicts import verdict_table

    if not has_tuning(trials):
        raise ValueError("no trial of phase 'tuned' (a --tune-each experiment has them)")
    given = trials[trials["phase"] == EVALUATION]
    tuned = trials[trials["phase"] == TUNED].assign(phase=EVALUATION)
    tables = {}
    for label, frame in (("given", given), ("tuned", tuned)):
        table = verdict_table(frame, reference=reference, metric=metric, margin=margin,
                              alpha=alpha)
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
    for key in keys:  # every tuned trial of an arm has its best configuration
        values = tuned.groupby("ablation")[key].first() if key in tuned else pd.Series()
        out[f"best_{key}"] = out["ablation"].map(values)
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
