"""The sentences of the paper table's caption (:func:`ablations.results.report.paper.
paper_table`) that depend on its rows: what would decide the inconclusive ones, a Δ over fewer
seeds than the means, the diverged runs and the difference test each row got."""

from __future__ import annotations

import numpy as np
import pandas as pd


def undecided_caption(rows: pd.DataFrame, attrs: dict) -> str:
    """What would decide the inconclusive rows, in one sentence: equivalence needs the margins
    their data support (their range, against the margin), a difference a smaller p
    (results/stats/undecided.py words each row for the console and the report)."""
    undecided = rows[rows["verdict"] == "inconclusive"]
    if undecided.empty or "equivalence_bound_holm" not in undecided:
        return ""
    flags = [undecided[column].fillna(False).astype(bool) if column in undecided else
             pd.Series(False, index=undecided.index) for column in ("outlier", "unstable")]
    barred = flags[0] | flags[1]
    tolerance = attrs.get("max_failure_rate")
    if tolerance is not None and "failure_rate_upper" in undecided:  # the run's tolerance
        barred |= undecided["failure_rate_upper"].astype(float) >= tolerance
    bounds = undecided.loc[~barred, "equivalence_bound_holm"].astype(float)
    bounds = bounds[np.isfinite(bounds)]
    relative = bool(attrs.get("relative"))

    def shown(value: float) -> str:
        return f"{100 * value:.1f}%" if relative else f"{value:.3g}"

    low, high = (shown(bounds.min()), shown(bounds.max())) if len(bounds) else ("", "")
    need = ([] if bounds.empty else
            [f"equivalent at a margin of ±{low}" + (f" to ±{high}" if high != low else "")])
    if barred.any():
        why = ("an outlying seed, more diverged seeds than the reference, or a failure-rate "
               f"bound not below the tolerance {tolerance:.0%}" if tolerance is not None else
               "an outlying seed, or more diverged seeds than the reference")
        need.append(f"{'' if need else 'equivalent at '}no margin for {int(barred.sum())} "
                    f"({why})")
    return f" The ? rows would be {'; '.join(need)}." if need else ""


def unpaired_caption(rows: pd.DataFrame, reference: str) -> str:
    """Where an arm's Δ rests on fewer seeds than its mean or the reference's (a seed one of
    them did not finish), the caption says so and names the arms: "... finished: 5 for no_x
    (means over 10 and 5) ..." "" where every Δ uses every seed of the two."""
    if "n_pairs" not in rows:
        return ""
    ran = rows["n_ok"].astype(float)
    shared = rows["n_pairs"].astype(float)
    base = int(ran.get(reference, 0))
    fewer = [(arm, int(pairs), int(n)) for arm, pairs, n in zip(rows.index, shared, ran)
             if arm != reference and pairs > 0 and pairs < max(n, base)]
    if not fewer:
        return ""
    named = ", ".join(f"{pairs} for {arm} (means over {n} and {base})"
                      for arm, pairs, n in fewer)
    return (f" Δ is over the seeds both the variant and {reference} finished: {named}; each "
            "mean is over every seed its variant finished.")


def failure_caption(rows: pd.DataFrame, alpha: float) -> str:
    """The caption's sentence on diverged runs: with none, the largest failure rate the seeds
    leave possible; with some, what the Diverged column gives. "" for a table without the
    bound."""
    if "failure_rate_upper" not in rows or rows["n_outcomes"].fillna(0).eq(0).all():
        return ""
    level = f"one-sided {1 - alpha:.0%} Clopper-Pearson"
    if rows["n_diverged"].fillna(0).gt(0).any():
        return f"Diverged: runs diverged of those that ended, the failure rate's {level} bound."
    worst = float(rows["failure_rate_upper"].max())
    return f"No run diverged: each failure rate ≤ {worst:.0%} ({level})."


def tests_named(rows: pd.DataFrame, reference: str, attrs: dict) -> str:
    """The difference test the caption names: the experiment's (``attrs["verdict_test"]``),
    and how many rows got another (an arm with a failed or outlying seed keeps its own)."""
    test = str(attrs.get("verdict_test", "paired t"))
    if "test" not in rows:
        return f"{test} test"
    others = rows.loc[[arm for arm in rows.index if arm != reference], "test"].dropna()
    others = others[others != test]
    rows_word = "row" if len(others) == 1 else "rows"
    return f"{test} test" + (f" ({len(others)} {rows_word} by another: the report's Test "
                             "column)" if len(others) else "")
