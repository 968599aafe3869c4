"""report.md and report.html with their figures, written into an experiment's folder (a path
or a URI): the report of one dataset (:mod:`ablations.results.report.build`) and the one across
datasets (:mod:`ablations.results.report.datasets_report`) alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ablations.results.io.files import join
from ablations.results.report.figure_files import copy_figures
from ablations.results.report.page import FIGURES_DIR, Section, html_page, markdown_page


def write_pages(directory: str | Path, title: str, summary: str, sections: list[Section],
                write_file: Callable[[str, bytes], Any]) -> tuple[Any, Any]:
    """The sections' figures into the folder's ``FIGURES_DIR``, then report.md and
    report.html, each through ``write_file``; what it returned for the two pages."""
    copy_figures([s.figure for s in sections if s.figure is not None],
                       join(directory, FIGURES_DIR), write_file)
    markdown_path = write_file(join(directory, "report.md"), markdown_page(
        title, summary, sections, FIGURES_DIR).encode())
    html_path = write_file(join(directory, "report.html"),
                           html_page(title, summary, sections).encode())
    return markdown_path, html_path
