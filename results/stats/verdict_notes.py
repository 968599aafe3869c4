"""What a verdict table's verdicts mean, in words: two lines under the table
(:func:`verdict_note`) and one where it is read at a glance (:func:`short_verdict_note`), with
the margin, α and the test the verdicts were decided with.

Re-exported by :mod:`ablations.results.stats.verdicts`.
"""

from __future__ import annotations

import pandas as pd

from ablations.results.stats.crossed import CROSSED_NOTE
from ablations.results.stats.margins import margin_text
from ablations.results.stats.shared_variance import DEFAULT_TEST


def short_verdict_note(table: pd.DataFrame) -> str:
    """One line under a verdict table where it is read at a glance (the console's summary):
    what was tested, with which test, and where the rest is (:func:`verdict_note` words every
    verdict; the report carries it)."""
    a = table.attrs
    if not a.get("variants_compared", a["comparisons"]):
        return verdict_note(table)
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    family = (f"Holm over {a['comparisons']} comparisons" if a["comparisons"] != 1
              else "one comparison")
    counts = table.loc[table["verdict"] != "reference", "verdict"].value_counts()
    told = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    return (f"Verdicts on {a['metric']} ({better[a['direction']]}) against {a['reference']}: "
            f"{told}; margin {margin_text(a)}, alpha {a['alpha']:g} for each kind, {family}, "
            f"{a.get('verdict_test', DEFAULT_TEST)} test (what each verdict means and what would "
            "decide the inconclusive ones: the report's appendix, docs/verdicts.md).")


def verdict_note(table: pd.DataFrame) -> str:
    """Two lines saying what :func:`verdict_table`'s verdicts mean, with its margin and α."""
    a = table.attrs
    # the reference ran alone (e.g. --only with its name)
    if not a.get("variants_compared", a["comparisons"]):
        return (f"Only the reference {a['reference']} ran: there is no variant to compare with "
                f"it, so no verdict on {a['metric']}; its numbers are in the table.")
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    bound = ("as a share of the reference's mean" if a.get("relative") else
             "in the metric's units")
    family = (f"Holm over {a['comparisons']} comparisons" if a["comparisons"] != 1
              else "one comparison")
    return (f"Verdicts on {a['metric']} ({better[a['direction']]}) against {a['reference']}, "
            f"margin {margin_text(a)}, alpha {a['alpha']:g}, {family}: worse/better = differs "
            "(two-sided t test);\nequivalent = TOST, the "
            f"{1 - 2 * a['alpha']:.0%} interval inside the margin (a percentage is tested as a "
            "ratio), never with an outlying seed or more diverged seeds than the reference "
            "(nor is such a variant better); "
            "negligible = both; inconclusive = neither; a diverged seed ranks below every "
            "finished one (worst-rank test). "
            f"equivalence_bound_holm: the smallest margin the data support, {bound}."
            + (f" Equivalent also needs the variant's failure-rate bound (diverged column) "
               f"below the tolerance {a['max_failure_rate']:.0%}."
               if a.get("max_failure_rate") is not None else "")
            + (f" {CROSSED_NOTE}" if a.get("crossed") else ""))
