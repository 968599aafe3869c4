"""The report's pages: the same sections as report.md and as one self-contained report.html.

A :class:`Section` is a heading, a paragraph, a table of strings (already formatted,
:mod:`ablations.results.report.formatting`) and/or a figure. Sections marked ``collapsed`` are
folded in the HTML (``<details>``); those marked ``appendix`` come last, under "Appendix", in both.
The HTML embeds the figures (base64 PNGs) and is laid out to fit a 1366 px laptop screen: text and
tables at most 1200 px wide, figures scaled to the column, long cells wrapped.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

# the folder of a report's figures, beside its pages
FIGURES_DIR = "report_files"

VERDICT_COLOURS = {  # background of a verdict cell
    "worse": "#fde2e1", "better": "#dcfce7", "equivalent": "#dbeafe", "negligible": "#eef2f7",
    "inconclusive": "#fef3c7", "higher": "#fde2e1", "lower": "#fde2e1", "reference": "#ffffff",
    "significant": "#fde2e1",
}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:15px;
  line-height:1.45;color:#1f2937;max-width:1200px;margin:0 auto;padding:0 20px 40px}
h1{font-size:24px;margin:24px 0 4px}h2{font-size:19px;margin:28px 0 6px;
  border-bottom:1px solid #e5e7eb;padding-bottom:3px}h3{font-size:16px;margin:18px 0 4px}
p{margin:6px 0 10px;max-width:1100px}.summary{color:#4b5563}
table{border-collapse:collapse;font-size:13px;margin:6px 0 14px;max-width:100%}
th,td{border:1px solid #e5e7eb;padding:3px 8px;vertical-align:top}
th{background:#f3f4f6;text-align:left;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.flag{font-weight:700}
img{max-width:100%;height:auto;display:block;margin:6px 0 14px}
details{margin:8px 0}summary{cursor:pointer;font-weight:600;font-size:16px;margin:10px 0}
code{background:#f3f4f6;padding:0 3px;border-radius:3px}
"""


@dataclass
class Section:
    title: str
    text: str = ""
    table: Optional[pd.DataFrame] = None  # strings; None: no table
    figure: Optional[Path] = None  # a PNG drawn for this section
    collapsed: bool = False  # folded in the HTML
    appendix: bool = False  # after the main sections, under "Appendix"
    level: int = 2  # heading level in the main part (3: a subsection)


def ordered(sections: list[Section]) -> list[Section]:
    return [s for s in sections if not s.appendix] + [s for s in sections if s.appendix]


def markdown_text(text: str) -> str:
    """``text`` with its ``<`` escaped (``\\<``, CommonMark's backslash escape): a name or a
    unit such as ``<script>`` shows as written instead of becoming HTML where report.md is
    rendered."""
    return str(text).replace("<", "\\<")


def markdown_page(title: str, summary: str, sections: list[Section], figures_dir: str) -> str:
    """report.md: its text (names and units of the user's code in it) escaped by
    :func:`markdown_text`, its tables by :func:`markdown_cells`."""
    lines = [f"# {markdown_text(title)}", "", markdown_text(summary), ""]
    in_appendix = False
    for section in ordered(sections):
        if section.appendix and not in_appendix:
            lines += ["## Appendix", ""]
            in_appendix = True
        hashes = "#" * (3 if section.appendix else section.level)
        lines += [f"{hashes} {markdown_text(section.title)}", ""]
        if section.text:
            lines += [markdown_text(section.text), ""]
        if section.table is not None:
            lines += [markdown_cells(section.table) if len(section.table) else "(none)", ""]
        if section.figure is not None:
            lines += [f"![{markdown_text(section.title)}]({figures_dir}/{section.figure.name})",
                      ""]
    return "\n".join(lines)


def markdown_cells(frame: pd.DataFrame) -> str:
    """A GitHub-style markdown table of ``frame``'s cells as they are (strings), with ``|``
    and ``<`` escaped (a cell's pipe would split it; ``<`` could start HTML)."""
    def cell(value: object) -> str:
        return markdown_text(str(value).replace("|", "\\|"))

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def html_page(title: str, summary: str, sections: list[Section]) -> str:
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1><p class='summary'>{html.escape(summary)}</p>"]
    in_appendix = False
    for section in ordered(sections):
        if section.appendix and not in_appendix:
            parts.append("<h2>Appendix</h2>")
            in_appendix = True
        body = html_body(section)
        if section.collapsed or section.appendix:
            parts.append(f"<details><summary>{html.escape(section.title)}</summary>{body}"
                         "</details>")
        else:
            tag = f"h{section.level}"
            parts.append(f"<{tag}>{html.escape(section.title)}</{tag}>{body}")
    parts.append("</body></html>")
    return "\n".join(parts)


def html_body(section: Section) -> str:
    parts = []
    if section.text:  # paragraphs at blank lines; a line meant as a line stays one
        for paragraph in section.text.split("\n\n"):
            lines = [html.escape(line) for line in paragraph.strip("\n").split("\n")]
            parts.append(f"<p>{'<br>'.join(lines)}</p>")
    if section.table is not None:
        parts.append(html_table(section.table) if len(section.table) else "<p>(none)</p>")
    if section.figure is not None:
        data = base64.b64encode(section.figure.read_bytes()).decode()
        parts.append(f"<img alt='{html.escape(section.title)}' "
                     f"src='data:image/png;base64,{data}'>")
    return "".join(parts)


def html_table(frame: pd.DataFrame) -> str:
    """Cells as given; numbers right-aligned, verdicts coloured, a leading ``*`` (a flagged
    cell) in bold."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for row in frame.itertuples(index=False):
        cells = []
        for value in row:
            text = str(value)
            style, css = "", []
            if text in VERDICT_COLOURS:
                style = f" style='background:{VERDICT_COLOURS[text]}'"
            if _numeric_text(text):
                css.append("num")
            if text.startswith("*"):
                css.append("flag")
            klass = f" class='{' '.join(css)}'" if css else ""
            cells.append(f"<td{klass}{style}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _numeric_text(text: str) -> bool:
    core = text.lstrip("*+-−< [").rstrip("] ")
    return bool(core) and (core[0].isdigit() or core.startswith("."))
