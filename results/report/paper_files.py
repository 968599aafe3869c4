"""The files a report writes for a paper beside its pages: the methods paragraph
(methods.md, methods.tex) with references.bib, always; and, for each format asked, the
ablation table (table.tex / table.md / table.csv) and the design's own tables
(:meth:`ablations.results.report.designs.DesignReport.paper_tables`: a factorial design's
effects, ``factorial_table.*``; a tuned ablation's verdicts, ``tuned_table.*``)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.results.io.files import join
from ablations.results.report.methods import REFERENCES_BIB, methods_text
from ablations.results.report.designs import paper_tables
from ablations.results.report.paper import paper_table
from ablations.results.stats.analyses import analysis_of
from ablations.results.stats.phases import evaluation_rows

PAPER_FILES = {"latex": "table.tex", "markdown": "table.md", "csv": "table.csv"}
WIDE_TABLE_FILE = "table_wide.tex"  # the LaTeX table across a two-column page (table*)
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
    # the design's own: a factorial design's effects, a tuned ablation's verdicts
    extra = paper_tables(analysis_of(meta), trials, settings, formats)
    written = {}
    for fmt in formats:
        written[fmt] = write(join(directory, PAPER_FILES[fmt]),
                             paper_table(ablation, evaluation, fmt).encode())
        if fmt == "latex":
            written["latex wide"] = write(join(directory, WIDE_TABLE_FILE), paper_table(
                ablation, evaluation, fmt, width="page").encode())
        for stem, (table, render) in extra.items():
            written[f"{stem} {fmt}"] = write(join(directory, f"{stem}_{PAPER_FILES[fmt]}"),
                                             render(table, fmt).encode())
    return written
