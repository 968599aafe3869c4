"""A metric: its column's name, which way is better, and its unit.

:class:`Metric` is the one description of a metric the runner has. Own code (a training
function, a command) declares its metrics as ``Metric`` values or in the short forms
:func:`parse_metrics` reads: ``{"test_acc": "higher", "test_loss": {"direction": "lower",
"unit": "nats"}}``. The analysis takes a ``Metric`` wherever a direction or a unit matters:
the verdicts turn ``higher`` / ``lower`` into ``better`` / ``worse`` with its direction; the
tables, plots and report print its unit, and no other.
:func:`ablations.results.io.directions.metric_of` gives the ``Metric`` of any column of
trials.parquet, from an experiment's declared metrics or the built-in model's tables.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Sequence

from ablations.config.values import ConfigError

Direction = Literal["higher", "lower"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Metric:
    """One metric: ``name`` is its column; ``direction`` says which way is better
    (``"higher"``, ``"lower"``, or None for a column with none, e.g. a coverage, whose
    verdicts say ``higher`` / ``lower``); ``unit`` is printed beside its values ("" for
    none). ``Metric("test_loss", "lower", "nats")``."""

    name: str
    direction: Optional[Direction]
    unit: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower", None):
            hint = (f"; a metric is Metric(name, direction, unit), e.g. "
                    f"Metric('test_loss', {self.name!r}, {self.direction!r})"
                    if self.name in ("higher", "lower") else "")
            raise ConfigError(f"metric direction {self.direction!r}: give 'higher' or 'lower' "
                              f"(which way is better){hint}")

    @property
    def sign(self) -> int:
        """+1 when higher is better, -1 when lower is, 0 when neither."""
        return {"higher": 1, "lower": -1}.get(self.direction or "", 0)

    def record(self) -> dict[str, Optional[str]]:
        """Its direction and unit as experiment.json's ``metrics`` keeps them."""
        return {"direction": self.direction, "unit": self.unit}


def parse_metrics(declared: Mapping[str, Any] | Sequence[Metric], *,
                  source: str = "metrics") -> dict[str, Metric]:
    """Declared metrics as :class:`Metric` values by name, from a list of ``Metric`` values or
    a mapping of name to a ``Metric`` of that name, ``"higher"`` / ``"lower"``, ``"lower
    nats"`` (direction then unit) or ``{direction:, unit:}``.

    Raises:
        ConfigError: no metric, a name that is not an identifier or given twice, a ``Metric``
            under another name, or a missing or bad direction.
    """
    if isinstance(declared, Sequence) and not isinstance(declared, str) and all(
            isinstance(value, Metric) for value in declared):
        names = [metric.name for metric in declared]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ConfigError(f"{source}: metric {twice[0]!r} is declared twice")
        declared = {metric.name: metric for metric in declared}
    if not isinstance(declared, Mapping) or not declared:
        raise ConfigError(f"{source}: declare at least one metric and its direction, e.g. "
                          "{test_acc: higher, test_loss: {direction: lower, unit: nats}}")
    out: dict[str, Metric] = {}
    for name, value in declared.items():
        name = str(name)
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{source}: metric name {name!r} is not an identifier "
                              "(letters, digits, _)")
        try:
            if isinstance(value, Metric):
                if value.name != name:
                    raise ConfigError(f"Metric named {value.name!r} under the name {name!r}")
                metric = value
            elif isinstance(value, str):
                direction, _, unit = value.strip().partition(" ")
                metric = Metric(name, direction, unit.strip())  # type: ignore[arg-type]
            elif isinstance(value, Mapping) and set(value) <= {"direction", "unit"}:
                metric = Metric(name, value.get("direction"),
                                str(value.get("unit", "") or ""))
            else:
                raise ConfigError(f"{value!r} is not a direction")
            if metric.direction is None:
                raise ConfigError("no direction")
        except ConfigError as exc:
            raise ConfigError(f"{source}: {name}: {exc}; e.g. {name}: higher, or "
                              f"{name}: {{direction: lower, unit: nats}}") from None
        out[name] = metric
    return out


def is_finite_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
