"""The methods paragraph's files (methods.md, methods.tex and the references.bib they cite),
and those of an experiment over several datasets beside its top report: the methods of the
whole and the verdicts across the datasets for a paper (``across_table.*``)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.results.io.files import join
from ablations.results.report.methods import REFERENCES_BIB, methods_text
from ablations.results.report.paper import FILES, WIDE_FILE, across_paper_table
from ablations.results.stats.phases import evaluation_rows

METHODS_FILES = {"markdown": "methods.md", "latex": "methods.tex"}
REFERENCES_BIB_FILE = "references.bib"
ACROSS_STEM = "across"  # across_table.tex, across_table_wide.tex, across_table.md, ...


def write_across_paper_files(directory: str, write: Callable[[str, bytes], Any], *,
                             meta: dict[str, Any], trials: pd.DataFrame,
                             verdicts: pd.DataFrame, across: pd.DataFrame,
                             formats: Sequence[str], baseline_line: Optional[str] = None
                             ) -> dict[str, Any]:
    """An experiment over several datasets: the methods paragraph of the whole (the design
    on each dataset and the test across them) from ``verdicts`` (every dataset's, one below
    the other) and, for each of ``formats``, the verdicts ``across`` the datasets as
    ``across_table.*`` (LaTeX: a column and a page-wide form); returns what was written."""
    write_methods(directory, write, meta, evaluation_rows(trials), verdicts, baseline_line)
    written = {}
    for fmt in formats:
        written[f"across {fmt}"] = write(
            join(directory, f"{ACROSS_STEM}_{FILES[fmt]}"),
            across_paper_table(across, fmt).encode())
        if fmt == "latex":
            written["across latex wide"] = write(
                join(directory, f"{ACROSS_STEM}_{WIDE_FILE}"),
                across_paper_table(across, fmt, width="page").encode())
    return written


def write_methods(directory: str, write: Callable[[str, bytes], Any], meta: dict[str, Any],
                  evaluation: pd.DataFrame, verdicts: pd.DataFrame,
                  baseline_line: Optional[str]) -> None:
    """methods.md, methods.tex and the references.bib they cite."""
    for style, file in METHODS_FILES.items():
        write(join(directory, file), methods_text(meta, evaluation, verdicts, style,
                                                  baseline_line=baseline_line).encode())
    write(join(directory, REFERENCES_BIB_FILE), REFERENCES_BIB.encode())
