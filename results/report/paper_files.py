"""The files a report writes for a paper beside its pages: the methods paragraph
(methods.md, methods.tex) with references.bib, always; and, for each format asked, the
ablation table (table.tex / table.md / table.csv) and the design's own tables
(:meth:`ablations.results.report.designs.DesignReport.paper_tables`: a factorial design's
effects, ``factorial_table.*``; a tuned ablation's verdicts, ``tuned_table.*``). An
experiment over several datasets writes its own beside each dataset's
(:mod:`ablations.results.report.methods_files`)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.config.comparison import Decision
from ablations.results.io.files import join
from ablations.results.report.methods_files import write_methods
from ablations.results.report.designs import paper_tables
from ablations.results.report.paper import FILES, WIDE_FILE, paper_table
from ablations.results.stats.analyses import analysis_of
from ablations.results.stats.phases import evaluation_rows


def write_paper_files(directory: str, write: Callable[[str, bytes], Any], *,
                      meta: dict[str, Any], trials: pd.DataFrame, ablation: pd.DataFrame,
                      formats: Sequence[str], baseline_line: Optional[str] = None
                      ) -> dict[str, Any]:
    """Write the methods paragraph and the tables in ``formats`` into ``directory`` with
    ``write(path, bytes)``, from ``trials`` (all of trials.parquet's rows) and ``ablation``
    (the verdict table the report shows, whose settings the other tables take); returns
    the tables written, name -> what ``write`` returned."""
    evaluation = evaluation_rows(trials)
    write_methods(directory, write, meta, evaluation, ablation, baseline_line)
    if not formats:
        return {}
    decision = Decision(**ablation.attrs["settings"])  # the four the verdicts were decided on
    # the design's own: a factorial design's effects, a tuned ablation's verdicts
    extra = paper_tables(analysis_of(meta), trials, decision, formats)
    written = {}
    for fmt in formats:
        written[fmt] = write(join(directory, FILES[fmt]),
                             paper_table(ablation, evaluation, fmt).encode())
        if fmt == "latex":
            written["latex wide"] = write(join(directory, WIDE_FILE), paper_table(
                ablation, evaluation, fmt, width="page").encode())
        for stem, (table, render) in extra.items():
            written[f"{stem} {fmt}"] = write(join(directory, f"{stem}_{FILES[fmt]}"),
                                             render(table, fmt).encode())
    return written

