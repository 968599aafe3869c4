"""The across-dataset verdicts as a reader sees them (:func:`ablations.results.stats.datasets.
across_datasets`'s table with readable columns; ratios as percentages), for the console, the
report and the trackers."""

from __future__ import annotations

import pandas as pd

from ablations.results.report.formatting import Column, readable

PERCENT = ("ratio", "ratio_ci_low", "ratio_ci_high", "tost_ci_low", "tost_ci_high", "pi_low",
           "pi_high")


def across_view(across: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the datasets pooled, the pooled ratio − 1 (%) with its intervals, the
    prediction interval, the consistent-direction count, the datasets' own verdicts (marked
    where every dataset reached the same), the verdict across them and its Holm p-values
    (τ and the rest: across_datasets.parquet)."""
    alpha = float(across.attrs.get("alpha", 0.05))
    shown = across.assign(**{c: 100 * across[c] for c in PERCENT},
                          same=[f"{int(s)}/{int(k)}" if k else "-" for s, k in
                                zip(across["n_same_direction"], across["n_datasets"])],
                          per_dataset=[f"{counts} (every dataset)" if every else counts
                                       for counts, every in zip(across["dataset_verdicts"],
                                                                across["on_every_dataset"])])
    columns = [
        Column("Variant", "ablation", "text"),
        Column("Datasets", "n_datasets", "count"),
        Column("Ratio − 1 (%)", "ratio", "difference"),
        Column(f"{1 - alpha:.0%} interval", ("ratio_ci_low", "ratio_ci_high"), "interval",
               decimals_from="ratio"),
        Column(f"{1 - 2 * alpha:.0%} interval (TOST)", ("tost_ci_low", "tost_ci_high"),
               "interval", decimals_from="ratio"),
        Column(f"{1 - alpha:.0%} prediction", ("pi_low", "pi_high"), "interval",
               decimals_from="ratio"),
        Column("Same direction", "same", "text"),
        Column("Per dataset", "per_dataset", "text"),
        Column("Verdict across", "verdict", "text"),
        Column("p (Holm)", "p_holm", "p"),
        Column("p equiv. (Holm)", "p_tost_holm", "p"),
    ]
    if shown["reason"].fillna("").ne("").any():
        columns.append(Column("Why", "reason", "text"))
    return readable(shown, columns)
