"""How the report's figures are written: each figure three times beside its path, PNG for the
report's pages, and PDF and SVG for a paper (:func:`save_figure`), the vector files at the
report's size and at each of a paper's layouts (:data:`LAYOUTS`): TrueType fonts embedded in
the PDF (Type 42, never Type 3, which journals refuse) and glyphs as paths in the SVG, so both
look the same without the fonts installed. Inside ``figure_formats("png")`` the PNG alone is
written (a quick look: embedding the PDFs' fonts is most of a report's time). The figures
themselves: :mod:`ablations.results.report.plots`, :mod:`ablations.results.report.dataset_plots`."""

from __future__ import annotations

import contextlib
import contextvars
import textwrap
import warnings
from pathlib import Path
from typing import Callable, Iterator

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402

from ablations.results.io.files import join, list_dir, remove_file  # noqa: E402

VECTOR_FORMATS = ("pdf", "svg")  # written beside each PNG
# the PDF's fonts as TrueType (Type 42); the SVG's text as glyph outlines
VECTOR_RC = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "path"}
# report --figures: all (each PNG with its PDFs and SVGs) or png (the PNGs alone)
FIGURES = ("all", "png")
_vector: contextvars.ContextVar[bool] = contextvars.ContextVar("vector_figures", default=True)


@contextlib.contextmanager
def figure_formats(figures: str) -> Iterator[None]:
    """Inside, :func:`save_figure` writes the PDFs and SVGs too (``all``) or the PNG alone
    (``png``), and :func:`copy_figures` copies them or removes their earlier copies. A context
    variable: a thread started inside would not see it (the report draws its figures in the
    caller's thread)."""
    if figures not in FIGURES:
        raise ValueError(f"figures {figures!r}: one of {', '.join(FIGURES)}")
    token = _vector.set(figures == "all")
    try:
        yield
    finally:
        _vector.reset(token)


# A paper's layouts: name -> (the figure's width in inches, the largest font in points): a
# two-column journal's full text width (6.75 in, as ICML's and IEEE's) and its column
# (3.25 in; :func:`_narrow`).
LAYOUTS = {"page": (6.75, 8.0), "column": (3.25, 7.0)}  # widest first: fonts only shrink


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` as ``path`` (PNG, 110 dpi, the report's size) and as PDF and SVG beside
    it, at the report's size and at each of :data:`LAYOUTS` (``forest-page.pdf``: 6.75 in
    wide, the height scaled alike, no font above 8 pt; ``forest-column.pdf``: 3.25 in, no
    font above 7 pt, :func:`_narrow`), unless :func:`figure_formats` says the PNG alone; the
    PNG's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    if not _vector.get():
        plt.close(fig)
        return path
    width, height = fig.get_size_inches()
    with plt.rc_context(VECTOR_RC), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tight_layout on a crowded small figure
        for suffix in VECTOR_FORMATS:
            fig.savefig(path.with_suffix(f".{suffix}"))
        for name, (target, points) in LAYOUTS.items():
            fig.set_size_inches(target, height * target / width)
            for text in fig.findobj(matplotlib.text.Text):
                text.set_fontsize(min(text.get_fontsize(), points))
            narrow = name == "column"
            if narrow:
                _narrow(fig, target, height * target / width, points)
            fig.tight_layout()
            for suffix in VECTOR_FORMATS:  # a column's legend below the axes: in the box
                fig.savefig(path.with_name(f"{path.stem}-{name}.{suffix}"),
                            **({"bbox_inches": "tight", "pad_inches": 0.02} if narrow else {}))
    plt.close(fig)
    return path


def _narrow(fig, width: float, height: float, points: float) -> None:
    """``fig`` for a journal's column: no titles (the caption says it), tick labels cut at
    their first double space (the forest plot's bounds), axis labels wrapped, the legend
    below the figure in two columns (the saved box takes it in), at least 2.4 in tall."""
    if fig.get_suptitle():
        fig.suptitle("")
    for ax in fig.axes:
        ax.set_title("")
        labels = [label.get_text() for label in ax.get_yticklabels()]
        if any("  " in label for label in labels):
            ax.set_yticks(ax.get_yticks(), [label.split("  ")[0] for label in labels])
        ax.set_xlabel(textwrap.fill(ax.get_xlabel(), 44))
        ax.set_ylabel(textwrap.fill(ax.get_ylabel(), 26))
        if ax.get_legend() is not None:  # below the figure: under every axis label
            handles, names = ax.get_legend_handles_labels()
            ax.get_legend().remove()
            fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
                       frameon=False, fontsize=points - 1.5, columnspacing=0.8,
                       handlelength=1.5)
    fig.set_size_inches(width, max(height, 2.4))


def copy_figures(figures: list[Path], folder: str, write_file: Callable[[str, bytes], object]
                 ) -> None:
    """Each PNG in ``figures``, with the PDFs and SVGs :func:`save_figure` wrote beside it,
    into ``folder`` (a path or a URI) through ``write_file``. Under ``figure_formats("png")``
    the vector files of those figures already in ``folder`` are removed instead, so that no
    PDF stays beside a PNG it no longer matches."""
    vectors = _vector.get()
    present = set() if vectors else set(list_dir(folder))
    for path in figures:
        write_file(join(folder, path.name), path.read_bytes())
        for vector in vector_files(path):
            if vectors:
                write_file(join(folder, vector.name), vector.read_bytes())
            elif vector.name in present:
                remove_file(join(folder, vector.name))


def vector_files(png: Path) -> list[Path]:
    """The PDFs and SVGs :func:`save_figure` wrote beside ``png``: the report's size, then each
    layout's."""
    return [png.with_name(f"{png.stem}{size}.{suffix}") for size in
            ("", *(f"-{name}" for name in LAYOUTS)) for suffix in VECTOR_FORMATS]
