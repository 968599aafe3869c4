"""The files a report writes for a paper beside its pages: the methods paragraph
(methods.md, methods.tex) with references.bib, always; and, for each format asked, the
ablation table (table.tex / table.md / table.csv), a factorial design's effects
(``factorial_table.*``) and a tuned ablation's verdicts (``tuned_table.*``)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.results.io.files import join
from ablations.results.report.methods import REFERENCES_BIB, methods_text
from ablations.results.report.paper import effects_paper_table, paper_table, tuned_paper_table
from ablations.results.stats.decisions import factorial_effects_of, tuned_comparison_of
from ablations.results.stats.phases import evaluation_rows

PAPER_FILES = {"latex": "table.tex", "markdown": "table.md", "csv": "table.csv"}
METHODS_FILES = {"markdown": "methods.md", "latex": "methods.tex"}
REFERENCES_BIB_FILE = "references.bib"


def write_paper_files(directory: str, write: Callable[[str, bytes], Any], *,
                      meta: dict[str, Any], trials: pd.DataFrame, ablation: pd.DataFrame,
                      formats: Sequence[str], baseline_line: Optional[str] = None
                      ) -> dict[str, Any]:
    """Write the methods paragraph and the tables in ``formats`` into ``directory`` with
    ``write(path, bytes)``, from ``trials`` (all of trials.parquet's rows) and ``ablation``
    (the verdict table the report shows, whose settings the other tables take); returns
    the tables written, name -> what ``write`` returned."""
    evaluation = evaluation_rows(trials)
    for style, file in METHODS_FILES.items():
        write(join(directory, file), methods_text(meta, evaluation, ablation, style,
                                                  baseline_line=baseline_line).encode())
    write(join(directory, REFERENCES_BIB_FILE), REFERENCES_BIB.encode())
    if not formats:
        return {}
    settings = {key: ablation.attrs["settings"][key]
                for key in ("reference", "metric", "margin", "alpha")}
    extra = {"factorial": (factorial_effects_of(trials, meta, **settings), effects_paper_table),
             "tuned": (tuned_comparison_of(trials, meta, **settings), tuned_paper_table)}
    written = {}
    for fmt in formats:
        written[fmt] = write(join(directory, PAPER_FILES[fmt]),
                             paper_table(ablation, evaluation, fmt).encode())
        for kind, (table, render) in extra.items():
            if table is not None:  # a factorial design's effects, a tuned ablation's
                written[f"{kind} {fmt}"] = write(join(directory, f"{kind}_{PAPER_FILES[fmt]}"),
                                                 render(table, fmt).encode())
    return written
