"""Numbers for reading, as the report prints them: one rule per kind of column.

- a quantity (``0.552``, a difference ``+0.409``): every value of a column with the same
  decimals, as many as give the column's largest value three significant digits (``0.552``
  beside ``0.001``, not ``0.0006629`` beside ``0.5403``); differences signed;
- an interval: ``[0.40, 0.55]`` at its column's decimals;
- a p-value: ``< 0.001``, ``0.004``, ``0.650``;
- a count: an integer.

:func:`readable` applies them to a table given the kind of each column and the new column
names; the cells become strings, the same in report.md and report.html.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import pandas as pd

from ablations.results.io.directions import MetricLike, metric_of


def unit_of(metric: MetricLike) -> str:
    """A :class:`~ablations.config.metrics.Metric`'s unit; for a column's name, the built-in
    model's: ``km`` for errors in the target's unit (MAE, RMSE, CRPS, bias), else ``""``
    (:func:`ablations.results.io.directions.metric_of`)."""
    return metric_of(metric).unit


def with_unit(name: str, unit: str) -> str:
    return f"{name} ({unit})" if unit else name


def decimals_for(values: Iterable[float], significant: int = 3) -> int:
    """Decimals that give the largest finite |value| ``significant`` digits (0 to 5)."""
    finite = np.abs(np.asarray([v for v in values if _is_number(v)], dtype=float))
    finite = finite[np.isfinite(finite) & (finite > 0)]
    if not len(finite):
        return 2
    return int(np.clip(significant - 1 - math.floor(math.log10(finite.max())), 0, 5))


def number(value: object, decimals: int, *, signed: bool = False) -> str:
    if not _is_number(value) or not math.isfinite(float(value)):
        return ""
    text = f"{float(value):+,.{decimals}f}" if signed else f"{float(value):,.{decimals}f}"
    if text.lstrip("+-").strip("0.,") == "":  # +0.000, -0.000: no sign on a zero
        return f"{0:.{decimals}f}"
    return text


def p_value(value: object) -> str:
    if not _is_number(value) or not math.isfinite(float(value)):
        return ""
    p = float(value)
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def interval(low: object, high: object, decimals: int) -> str:
    if not (_is_number(low) and _is_number(high)) or not (
            math.isfinite(float(low)) and math.isfinite(float(high))):
        return ""
    return f"[{number(low, decimals)}, {number(high, decimals)}]"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)) and not pd.isna(value)


@dataclass(frozen=True)
class Column:
    """One column of a readable table: ``source`` (or ``(low, high)`` for an interval) shown
    as ``kind`` (quantity, difference, interval, p, count, text) under ``title``."""

    title: str
    source: str | tuple[str, str]
    kind: str = "quantity"
    decimals_from: Optional[str] = None  # share the decimals of this source column


def readable(frame: pd.DataFrame, columns: list[Column]) -> pd.DataFrame:
    """``frame`` with ``columns`` only, each formatted for reading, as strings."""
    out = {}
    for column in columns:
        if column.kind == "interval":
            low, high = column.source
            basis = frame[column.decimals_from] if column.decimals_from else pd.concat(
                [frame[low], frame[high]])
            decimals = decimals_for(basis)
            out[column.title] = [interval(a, b, decimals) for a, b in zip(frame[low],
                                                                          frame[high])]
            continue
        values = frame[column.source]
        if column.kind == "p":
            out[column.title] = [p_value(v) for v in values]
        elif column.kind == "count":
            out[column.title] = ["" if not _is_number(v) or not math.isfinite(float(v))
                                 else f"{int(v):,}" for v in values]
        elif column.kind in ("quantity", "difference"):
            decimals = decimals_for(frame[column.decimals_from] if column.decimals_from
                                    else values)
            out[column.title] = [number(v, decimals, signed=column.kind == "difference")
                                 for v in values]
        else:
            out[column.title] = ["" if v is None or (isinstance(v, float) and math.isnan(v))
                                 or v is pd.NA else str(v) for v in values]
    return pd.DataFrame(out, index=frame.index)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """A table of raw analysis numbers (the appendix) with each column formatted by its name:
    p-values as p-values, counts as integers, the rest as quantities."""
    columns = []
    for name in frame.columns:
        values = frame[name]
        if name.startswith("p_") or name.endswith("_p") or "_p_" in name:
            kind = "p"
        elif name in ("n", "n_ok", "n_excluded", "n_seeds", "n_pairs", "looks", "trials",
                      "rounds") or pd.api.types.is_integer_dtype(values):
            kind = "count"
        elif pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            kind = "quantity"
        else:
            kind = "text"
        columns.append(Column(name, name, kind))
    return readable(frame, columns)


# LaTeX's special characters in text mode, each as text that sets it
TEX_SPECIALS = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
                "#": r"\#", "^": r"\textasciicircum{}", "_": r"\_", "~": r"\textasciitilde{}",
                "%": r"\%", "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
# symbols pdflatex's default fonts lack in text mode, set as math (or as their ASCII form)
TEX_SYMBOLS = {"±": r"$\pm$", "Δ": r"$\Delta$", "α": r"$\alpha$", "μ": r"$\mu$", "µ": r"$\mu$",
               "σ": r"$\sigma$", "τ": r"$\tau$", "·": r"$\cdot$", "×": r"$\times$",
               "²": r"$^{2}$", "³": r"$^{3}$", "°": r"$^{\circ}$", "†": r"$\dagger$",
               "‡": r"$\ddagger$", "≈": r"$\approx$", "∼": r"$\sim$", "≤": r"$\leq$",
               "≥": r"$\geq$", "↑": r"$\uparrow$", "↓": r"$\downarrow$", "−": "-", "–": "--",
               "—": "---", "‘": "`", "’": "'", "“": "``", "”": "''", "…": r"\ldots{}"}


def tex(text: str) -> str:
    """Plain ``text`` (a name, a unit, a caption) as LaTeX text that pdflatex sets with its
    default fonts: the special characters escaped, the symbols above as math, the Latin-1
    letters (é, ü, ...) as they are (pdflatex reads UTF-8), and any other character, which
    those fonts cannot set, as ``?``."""
    out = []
    for char in str(text):
        if char in TEX_SPECIALS:
            out.append(TEX_SPECIALS[char])
        elif char in TEX_SYMBOLS:
            out.append(TEX_SYMBOLS[char])
        elif ord(char) < 128 or 0xC0 <= ord(char) <= 0xFF and char not in "×÷":
            out.append(char)
        else:
            out.append("?")
    return "".join(out)
