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
    sequential = "level_diff" in verdicts
    rows = verdicts.reset_index() if "ablation" not in verdicts else verdicts
    lines = []
    for _, row in rows[rows["verdict"] == "inconclusive"].iterrows():
        if sequential:
            p, level = float(row.get("p_value", math.nan)), float(row["level_diff"])
            at = "at its look"
        else:
            p, level = float(row.get("p_holm", math.nan)), float(a.get("alpha", math.nan))
            at = "after Holm"
        if math.isnan(p):
            parts = ["no test of a difference (fewer than 2 ok seeds on each side)"]
        else:
            parts = [f"a difference needs p below {level:.3g} {at} (it has {p:.3g})"]
        bound = float(row.get("equivalence_bound_holm", math.nan))
        if not math.isnan(bound) and margin is not None:
            parts.append(f"equivalence needs a margin of {_bound(bound, relative)} (the "
                         f"margin is {_bound(float(margin), relative)})")
        lines.append(f"{row['ablation']}: inconclusive: " + "; ".join(parts))
    return lines
