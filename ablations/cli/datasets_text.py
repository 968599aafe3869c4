"""What the command line prints after an experiment over several datasets (docs/datasets.md):
each dataset's summary and verdicts, then the verdicts across the datasets, and with five or
more datasets the arms' ranks."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd


def datasets_summary(trials_df: pd.DataFrame, meta: dict[str, Any], settings: dict[str, Any]
                     ) -> tuple[str, Optional[pd.DataFrame], Optional[pd.DataFrame]]:
    """The summary of each dataset (:func:`ablations.cli.output.summary_table` on its trials),
    then the across-dataset table, its note and the ranks; with the verdicts of every dataset,
    one below the other, and the table across them (each None where none is possible). Each
    dataset's verdicts are decided once, for all three."""
    from ablations.cli.output import summary_table
    from ablations.results.report.dataset_tables import across_view
    from ablations.results.stats.dataset_rows import by_dataset
    from ablations.results.stats.datasets import across_note, rank_comparison
    from ablations.results.stats.decisions import (
        across_datasets_of,
        dataset_verdicts_of,
        one_below_the_other,
    )
    from ablations.results.io.directions import declared_metrics
    from ablations.results.stats.phases import evaluation_rows

    per_dataset = dataset_verdicts_of(trials_df, meta, **settings)
    blocks = []
    for name, rows in by_dataset(trials_df).items():
        known = per_dataset[name] if len(per_dataset[name]) else None  # else it says why
        blocks.append(f"Dataset {name} ({len(rows)} trials):\n"
                      f"{summary_table(rows, meta, verdicts=known, **settings)}")
    try:
        verdicts = one_below_the_other(per_dataset)
        across = across_datasets_of(trials_df, meta, per_dataset, **settings)
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
    with declared_metrics(meta.get("metrics")):  # own code's metric directions
        ranks = rank_comparison(evaluation_rows(trials_df), metric=settings["metric"],
                                alpha=settings["alpha"])
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
