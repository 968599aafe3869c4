"""What would decide an `inconclusive` row, in words under the verdict table (console and
report): the test of a difference against the level it had to beat, and the smallest margin the
data support against the margin fixed before them. A blank beside a large effect reads as "no
effect"; these lines say it is a p-value a hair above its Holm step, or an interval too wide
for the margin."""

from __future__ import annotations

import math

import pandas as pd


def _bound(value: float, relative: bool) -> str:
    return f"±{value:.1%}" if relative else f"±{value:.3g}"


def undecided_lines(verdicts: pd.DataFrame) -> list[str]:
    """One line per `inconclusive` row of a verdict table
    (:func:`ablations.results.stats.verdicts.verdict_table` or the sequential one): ``arm:
    inconclusive: a difference needs p below L (it has p); equivalence needs the margin to
    cover ±B (the margin is ±M)``. In a sequential table (a ``--seeds auto`` run, or a fixed
    run that is the pilot look of its design) p and L are that look's (``p_value``,
    ``level_diff``: the level of the Holm step the arm reached); in a fixed one, Holm's
    adjusted p against α. [] where no row is inconclusive."""
    if "verdict" not in verdicts:
        return []
    a = verdicts.attrs
    relative, margin = bool(a.get("relative")), a.get("margin")
    per_look = "level_diff" in verdicts  # a sequential table: each arm's look's level
    rows = verdicts.reset_index() if "ablation" not in verdicts else verdicts
    direction = int(a.get("direction", -1) or 0)
    lines = []
    for _, row in rows[rows["verdict"] == "inconclusive"].iterrows():
        if _flag(row, "no_seed_variance"):  # no test: the seed-tie line says why
            lines.append(f"{row['ablation']}: no verdict: "
                         f"{row.get('reason') or 'no seed variance'}")
            continue
        parts = [_difference(row, per_look, float(a.get("alpha", math.nan)), direction),
                 _equivalence(row, margin, relative, a.get("max_failure_rate"))]
        lines.append(f"{row['ablation']}: inconclusive: " + "; ".join(parts))
    return lines


def _flag(row: pd.Series, column: str) -> bool:
    value = row.get(column)
    return False if value is None or pd.isna(value) else bool(value)


def _difference(row: pd.Series, per_look: bool, alpha: float, direction: int) -> str:
    """What the test of a difference needed, and what it had."""
    # a sequential table's p and level are its look's; a fixed one's Holm's p against α
    p, level, at = ((float(row.get("p_value", math.nan)), float(row["level_diff"]),
                     "at its look") if per_look else
                    (float(row.get("p_holm", math.nan)), alpha, "after Holm"))
    diff = float(row.get("diff_mean", math.nan))
    rank = float(row.get("p_worst_rank", math.nan))
    if _flag(row, "unstable") and direction and diff * direction > 0:
        # the finished seeds' t test only counts where it points worse: the diverged seeds
        # are the arm's worst outcomes
        worse = "" if math.isnan(rank) else \
            f", and its worst-rank test has not shown it worse (p {rank:.3g})"
        return ("better on its finished seeds but diverged more often than the reference: "
                f"never called better{worse}")
    if per_look and row.get("test") == "t + worst-rank" and not math.isnan(rank):
        # a discordant seed splits the look's level between the t test of the finished
        # seeds and the worst-rank test: neither p is read against the whole level
        t_part = "no t test" if math.isnan(p) else f"t test p {p:.3g}"
        return (f"a difference needs one part of its test below its share of the level "
                f"{level:.3g} at its look ({t_part}, worst-rank p {rank:.3g})")
    if math.isnan(p):
        return "no test of a difference (fewer than 2 ok seeds on each side)"
    return f"a difference needs p below {level:.3g} {at} (it has {p:.3g})"


def _equivalence(row: pd.Series, margin: float | None, relative: bool,
                 tolerance: float | None) -> str:
    """What a claim of equivalence needed, and what it had."""
    if _flag(row, "unstable"):
        return "no equivalence claim (more diverged seeds than the reference)"
    bound = float(row.get("failure_rate_upper", math.nan))
    if tolerance is not None and bound >= tolerance:
        return (f"no equivalence claim (failure rate ≤{bound:.0%} not below the tolerance "
                f"{tolerance:.0%}: more seeds lower it)")
    if _flag(row, "outlier"):
        return "no equivalence claim (an outlying seed)"
    bound = float(row.get("equivalence_bound_holm", math.nan))
    if math.isinf(bound) and margin is not None:  # a pilot look's small level at few seeds
        return ("no equivalence claim at these seeds (at the level this test may spend, its "
                "interval is unbounded: more seeds bound it)")
    if not math.isfinite(bound) or margin is None:
        return "no equivalence test (fewer than 2 ok seeds on each side)"
    return (f"equivalence needs a margin of {_bound(bound, relative)} (the margin is "
            f"{_bound(float(margin), relative)})")
