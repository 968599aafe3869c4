"""The equivalence margin: parsed from what was given (:func:`parse_margin`), resolved against
the reference's mean (:func:`resolve_margin`) and worded as the verdicts tested it
(:func:`margin_text`).

Re-exported by :mod:`ablations.results.stats.verdicts`.
"""

from __future__ import annotations

import numpy as np


def parse_margin(margin: str | float) -> tuple[float, bool]:
    """``"5%"`` -> (0.05, True): relative to the reference's mean; ``"0.02"`` or 0.02 ->
    (0.02, False): in the metric's units.

    Raises:
        ValueError: not a positive finite number or percentage; the message says the form.
    """
    text = str(margin).strip()
    relative = text.endswith("%")
    try:
        value = float(text.removesuffix("%")) / (100 if relative else 1)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"margin {str(margin)!r}: give a positive number in the metric's units "
                         "(0.02) or a percentage of the reference's mean (5%)")
    return value, relative


def resolve_margin(margin: str | float, reference_mean: float) -> tuple[float, bool]:
    """The margin as tested: (share, True) for a percentage, tested as a ratio against the
    reference's mean (which must be above 0), else (units, False).

    Raises:
        ValueError: a bad margin, or a relative one against a mean that is not above 0.
    """
    value, relative = parse_margin(margin)
    if relative and not reference_mean > 0:
        raise ValueError(f"margin {margin!r}: a percentage is tested as a ratio to the "
                         f"reference's mean, here {reference_mean:g} (not above 0): give the "
                         "margin in the metric's units (e.g. 0.02)")
    return value, relative


def margin_text(attrs: dict, unit: str = "") -> str:
    """The margin as the verdicts tested it: ``±5% of baseline's mean (0.552), tested as a
    ratio`` or ``±0.02 km``."""
    if attrs.get("relative"):
        return (f"±{attrs['margin'] * 100:.3g}% of {attrs['reference']}'s mean "
                f"({attrs['reference_mean']:.3g}), tested as a ratio")
    return f"±{attrs['margin']:.3g}{f' {unit}' if unit else ''}"
