"""The end-of-run summary as text: per variant its seeds, its metrics and its verdict against
the reference, with the notes that say what the verdicts mean (:func:`summary_table`); over
several datasets each dataset's, then the verdicts across them and the ranks
(:func:`datasets_summary`). The command line prints it; :class:`~ablations.experiment.api.
Results` carries it (``summary``) and the trackers log it (summary.txt)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.config.statuses import TrialStatus


def declared_columns(ok: Any, declared: dict[str, Any], metric: str) -> dict[str, str]:
    """Own code's metrics as the summary shows them: ``name (unit)``, mean ± std over the ok
    seeds for the verdicts' metric, the mean for the others; a NaN or infinite value is left
    out (the comparisons leave out the verdicts' metric's so, and the line under the table
    names those trials)."""
    columns = {}
    for name in dict.fromkeys([metric, *declared]):
        if name not in ok:
            continue
        values = _finite(ok[name].astype(float))
        unit = (declared.get(name) or {}).get("unit")
        label = f"{name} ({unit})" if unit else name
        if name == metric and len(values) > 1:
            columns[label] = f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"
        else:
            columns[label] = f"{values.mean():.4g}" if len(values) else "-"
    return columns


def _finite(values: pd.Series) -> pd.Series:
    return values[np.isfinite(values)]


def builtin_columns(ablation: str, ok: Any, group: Any) -> dict[str, str]:
    """The built-in model's (and plugins') figures as the summary shows them; the test MAE's
    mean ± std over the ok seeds whose value is finite (:func:`declared_columns`)."""
    mae = _finite(ok["test_mae"].astype(float))
    return {
        "ablation": ablation,
        "ok": f"{len(ok)}/{len(group)}",
        "test_mae_km": f"{mae.mean():.3f} ± {mae.std(ddof=1):.3f}" if len(mae) > 1
        else (f"{mae.mean():.3f}" if len(mae) else "-"),
        "test_rmse_km": f"{ok['test_rmse'].mean():.3f}" if len(ok) else "-",
        "test_coverage_90": f"{ok['test_coverage_90'].mean():.2f}"
        if len(ok) and ok["test_coverage_90"].notna().any() else "-",
        "samples_per_s": f"{ok['train_samples_per_s'].mean():.0f}" if len(ok) else "-",
        "peak_mem_mb": f"{ok['peak_mem_mb'].mean():.0f}" if len(ok) else "-",
        "wall_s": f"{group['wall_s'].mean():.1f}",
        "cpu_h": f"{group['cpu_hours'].sum():.3f}",
    }


def summary_table(trials_df: Any, meta: Optional[dict[str, Any]] = None, *,
                  reference: Optional[str] = None, metric: Optional[str] = None,
                  margin: str | float | None = None, alpha: Optional[float] = None,
                  verdicts: Any = None, epochs: Any = None,
                  decision: Optional[Decision] = None) -> str:
    """Per variant: ok/total trials (the seeds spent), mean ± std of the test MAE over ok
    trials, ...; where the reference is a variant with an ok trial, also each variant's verdict
    against it and the equivalence bound it reached, and a note under the table with the
    margin and alpha. The verdicts are :func:`ablations.results.stats.decisions.verdicts_of`'s: as
    the experiment's design (``meta``: its experiment.json) decides them, at the settings recorded
    before the data unless others are given (then labelled exploratory); ``verdicts``: that
    table if the caller has it already; ``epochs``: epochs.parquet's rows, whose curves tell a
    program that ignores its seed from a coarse metric (without them, the trials' metrics);
    ``decision``: the four settings as one :class:`~ablations.config.comparison.Decision`
    (those it leaves None: the keywords')."""
    from ablations.results.stats.analyses import analysis_of
    from ablations.results.stats.phases import evaluation_rows

    meta = meta or {}
    analysis = analysis_of(meta)  # one dataset's (datasets_summary: each in turn)
    decision = analysis.decision((decision or NOT_GIVEN).over(Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha)))
    trials_df = evaluation_rows(trials_df)  # a tuned ablation's: beside it, summary_lines
    verdicts, no_verdicts = _verdicts_or_why(trials_df, meta, decision, known=verdicts)
    rows = [_summary_row(ablation, group, meta, decision.metric, verdicts, analysis.decided_at)
            for ablation, group in trials_df.groupby("ablation", sort=False)]
    table = pd.DataFrame(rows).to_string(index=False)
    if verdicts is None:
        return table + no_verdicts
    return _with_notes(table, trials_df, verdicts, analysis, decision, epochs)


def _verdicts_or_why(trials_df: pd.DataFrame, meta: dict[str, Any], decision: Decision, *,
                     known: Any) -> tuple[Optional[pd.DataFrame], str]:
    """The verdict table by variant (``known``, where the caller has it), else None and the
    lines that say why there is none ("" for a single variant, or without the reference)."""
    from ablations.results.stats.analyses import analysis_of

    reference = decision.reference
    several = trials_df["ablation"].nunique() > 1
    ok_reference = (trials_df["ablation"] == reference) & (trials_df["status"] == TrialStatus.OK)
    if ok_reference.any() and several:
        try:
            return (known if known is not None else analysis_of(meta, trials_df).verdicts(
                trials_df, decision)).set_index("ablation"), ""
        except (ValueError, KeyError) as exc:  # e.g. a relative margin of a mean of 0
            return None, f"\n\nNo verdicts: {exc}"
    if (trials_df["ablation"] == reference).any() and several:
        statuses = trials_df.loc[trials_df["ablation"] == reference, "status"].value_counts()
        counted = ", ".join(f"{n} {status}" for status, n in statuses.items())
        return None, (f"\n\nNo verdicts: the reference {reference} has no ok trial "
                      f"({counted}); nothing to compare the variants with.")
    return None, ""


def _summary_row(ablation: str, group: pd.DataFrame, meta: dict[str, Any], metric: str,
                 verdicts: Optional[pd.DataFrame], decided_at: bool) -> dict[str, str]:
    """One variant's row: its seeds, its figures (own code's declared metrics, the verdicts'
    first, else the built-in model's) and, with ``verdicts``, its verdict."""
    ok = group[group["status"] == TrialStatus.OK]
    if meta.get("metrics"):  # own code: its declared metrics, the verdicts' first
        row = {"ablation": ablation, "ok": f"{len(ok)}/{len(group)}",
               **declared_columns(ok, meta["metrics"], metric),
               "wall_s": f"{group['wall_s'].mean():.1f}",
               "cpu_h": f"{group['cpu_hours'].sum():.3f}"}
    else:
        row = builtin_columns(ablation, ok, group)
    if verdicts is not None:
        row.update(_verdict_columns(verdicts, ablation, decided_at))
    return row


def _verdict_columns(verdicts: pd.DataFrame, ablation: str,
                     decided_at: bool) -> dict[str, str]:
    """A variant's verdict, its diverged runs with their rate's bound, the equivalence bound
    it reached and (a sequential design's) the seeds it was decided at."""
    from ablations.results.stats.failures import failure_bound_text

    bound = verdicts.loc[ablation, "equivalence_bound_holm"]
    columns = {"verdict": verdicts.loc[ablation, "verdict"]}
    if "failure_rate_upper" in verdicts:  # its diverged runs, its rate's bound
        columns["diverged"] = failure_bound_text(
            int(verdicts.loc[ablation, "n_diverged"]),
            int(verdicts.loc[ablation, "n_outcomes"]),
            float(verdicts.loc[ablation, "failure_rate_upper"])) or "-"
    columns["equiv_bound"] = ("-" if pd.isna(bound) else f"{bound:.1%}"
                              if verdicts.attrs.get("relative") else f"{bound:.3f}")
    if decided_at and "decided_at" in verdicts:
        seeds_at = verdicts.loc[ablation, "decided_at"]
        columns["decided_at"] = "-" if pd.isna(seeds_at) else f"{int(seeds_at)} seeds"
    return columns


def _with_notes(table: str, trials_df: pd.DataFrame, verdicts: pd.DataFrame, analysis: Any,
                decision: Decision, epochs: Any) -> str:
    """``table`` with the notes under it: arms without seed variance first, then what the
    verdicts mean, the trials left out, why each decided row reads as it does and how the
    design decided."""
    from ablations.results.stats.analysis import dropped_note
    from ablations.results.stats.planned import exploratory_note
    from ablations.results.stats.seed_ties import seed_tie_lines
    from ablations.results.stats.verdicts import short_verdict_note

    metric = decision.metric
    ties = seed_tie_lines(trials_df, metric=str(verdicts.attrs.get("metric", metric)),
                          reference=decision.reference, epochs=epochs)
    if ties:  # first under the table: no verdict below means anything without seed variance
        table += "\n\n" + "\n".join(ties)
    exploratory = verdicts.attrs.get("exploratory")
    label = f"{exploratory_note(exploratory)}\n" if exploratory else ""
    text = f"{table}\n\n{label}{short_verdict_note(verdicts)}"
    dropped = dropped_note(verdicts.attrs.get("dropped_nan", []), metric)
    if dropped:
        text += f"\n{dropped}"
    # why a decided row reads as it does (what would decide an undecided one: the report's
    # appendix, undecided_lines)
    reasons = verdicts["reason"] if "reason" in verdicts else pd.Series(dtype=object)
    decided = verdicts["verdict"] != "inconclusive"
    for ablation, reason in reasons[(reasons.fillna("") != "") & decided].items():
        text += f"\n{ablation}: {verdicts.loc[ablation, 'verdict']}: {reason}"
    for note in analysis.summary_notes(trials_df, decision.alpha):  # how the design decided
        text += f"\n{note}"
    return text


def datasets_summary(trials_df: pd.DataFrame, meta: dict[str, Any], decision: Decision
                     ) -> tuple[str, Optional[pd.DataFrame], Optional[pd.DataFrame]]:
    """The summary of each dataset at ``decision`` (:func:`summary_table` on its trials),
    then the across-dataset table, its note and the ranks; with the verdicts of every dataset,
    one below the other, and the table across them (each None where none is possible). Each
    dataset's verdicts are decided once, for all three."""
    from ablations.results.report.dataset_tables import across_view
    from ablations.results.stats.dataset_rows import by_dataset
    from ablations.results.stats.datasets import FULL_ALPHA_NOTE, across_note, rank_comparison
    from ablations.results.stats.analyses import (
        DatasetsAnalysis,
        analysis_of,
        one_below_the_other,
    )
    from ablations.results.io.directions import metric_of
    from ablations.results.stats.phases import evaluation_rows

    per_dataset = DatasetsAnalysis(analysis_of(meta)).per_dataset(trials_df, decision)
    blocks = []
    for name, rows in by_dataset(trials_df).items():
        known = per_dataset[name] if len(per_dataset[name]) else None  # else it says why
        blocks.append(f"Dataset {name} ({len(rows)} trials):\n"
                      f"{summary_table(rows, meta, verdicts=known, decision=decision)}")
    blocks.append(FULL_ALPHA_NOTE)
    try:
        verdicts = one_below_the_other(per_dataset)
        across = analysis_of(meta, trials_df).across(trials_df, per_dataset, decision)
    except (ValueError, KeyError) as exc:
        blocks.append(f"No verdicts across the datasets: {exc}")
        return "\n\n".join(blocks), None, None
    if across is None or across.empty:
        blocks.append("No verdicts across the datasets: no variant beside the reference.")
        return "\n\n".join(blocks), verdicts, None
    text = (f"Across {len(across.attrs['datasets'])} datasets "
            f"({', '.join(across.attrs['datasets'])}):\n"
            f"{across_view(across).to_string(index=False)}\n\n{across_note(across)}")
    blocks.append(text)
    # own code's declared direction, else the built-in model's
    ranks = rank_comparison(evaluation_rows(trials_df),
                            metric=metric_of(decision.metric, meta.get("metrics")),
                            alpha=decision.alpha)
    if ranks is not None:
        blocks.append(ranks_text(ranks))
    return "\n\n".join(blocks), verdicts, across


def ranks_text(ranks: Any) -> str:
    """The average ranks, Friedman's p and the critical difference, in a few lines."""
    average = ", ".join(f"{arm} {rank:.2f}" for arm, rank in ranks.average.items())
    return (f"Average ranks over {len(ranks.scores)} datasets (1 = best; each arm's median "
            f"over seeds, a diverged seed the worst): {average}.\nFriedman's test p = "
            f"{ranks.friedman_p:.3g}; Nemenyi's critical difference at α = {ranks.alpha:g}: "
            f"{ranks.critical_difference:.2f} (arms whose average ranks differ by less are not "
            "told apart; the report draws the critical-difference diagram).")
