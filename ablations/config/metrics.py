"""What a user's code declares about its metrics: which way is better, and the unit.

Own code (a training function, a command) names its metrics with a direction and an optional
unit: ``{"test_acc": "higher", "test_loss": {"direction": "lower", "unit": "nats"}}``, or
:class:`Metric` values. The verdicts turn ``higher`` / ``lower`` into ``better`` / ``worse``
with the direction; the tables, plots and report print the unit, and no other
(results/io/directions.py, :func:`~ablations.results.io.directions.declared_metrics`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ablations.config.values import ConfigError

Direction = Literal["higher", "lower"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Metric:
    """One declared metric: ``direction`` says which way is better; ``unit`` is printed
    beside its values ("" for none)."""

    direction: Direction
    unit: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower"):
            raise ConfigError(f"metric direction {self.direction!r}: give 'higher' or 'lower' "
                              "(which way is better)")

    @property
    def sign(self) -> int:
        """+1 when higher is better, -1 when lower is."""
        return 1 if self.direction == "higher" else -1

    def record(self) -> dict[str, str]:
        return {"direction": self.direction, "unit": self.unit}


def parse_metrics(declared: Mapping[str, Any], *, source: str = "metrics") -> dict[str, Metric]:
    """Declared metrics as :class:`Metric` values, from ``Metric``s, ``"higher"`` /
    ``"lower"``, ``"lower nats"`` (direction then unit) or ``{direction:, unit:}``.

    Raises:
        ConfigError: no metric, a name that is not an identifier, or a bad direction.
    """
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
                out[name] = value
            elif isinstance(value, str):
                direction, _, unit = value.strip().partition(" ")
                out[name] = Metric(direction, unit.strip())  # type: ignore[arg-type]
            elif isinstance(value, Mapping) and set(value) <= {"direction", "unit"}:
                out[name] = Metric(value.get("direction"), str(value.get("unit", "") or ""))
            else:
                raise ConfigError(f"{value!r} is not a direction")
        except ConfigError as exc:
            raise ConfigError(f"{source}: {name}: {exc}; e.g. {name}: higher, or "
                              f"{name}: {{direction: lower, unit: nats}}") from None
    return out


def is_finite_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
