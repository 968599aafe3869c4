"""Parsers of single user values and the YAML reader, below the trial config.

Each function parses one value a user wrote (a YAML scalar, a ``--set`` string or a Python
value) strictly, or reads a YAML mapping of keys; none knows which keys exist or which section
they belong to (that is ablations/config.py, which re-exports these names). Every error is a
:class:`ConfigError` whose message names the value and the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from model.config import parse_widths as _model_widths

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


class ConfigError(ValueError):
    """A bad configuration value or key; the message names it and the fix."""


def parse_bool(value: Any, *, name: str = "value") -> bool:
    """true/false/1/0/yes/no in any case (and real booleans); anything else is an error.

    ``bool("False")`` is True; this is the parser that ``type=bool`` should have been.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: {value!r} is not a boolean; use true/false, yes/no or 1/0")


def _parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an integer, got a boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None


def _parse_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a number, got a boolean {value!r}")
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name}: {value!r} is not a finite number")
    return number


def parse_widths(value: Any, *, name: str = "cnn_widths") -> str:
    """'64,128,256', '64/128/256' or a list of three ints -> canonical '64,128,256'."""
    try:
        return _model_widths(value, name=name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_scalar_names(value: Any, *, name: str = "drop_scalars") -> str:
    """Scalar column names as a YAML list, 'scalar_a,scalar_b' or '' -> the canonical
    'scalar_a,scalar_b' (sorted, each once; '' = none). Whether the data has them is checked
    against the data before any trial starts (``ablations.planning.plan_trials``)."""
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        if any("," in item for item in items):
            raise ConfigError(f"{name}: {value!r}: a column name cannot contain a comma")
    elif isinstance(value, dict):
        raise ConfigError(f"{name}: expected column names, got a mapping {value!r}")
    else:
        items = [part.strip() for part in str(value).split(",")]
    names = sorted({item for item in items if item})
    bad = [n for n in names if not n.startswith("scalar_") or n == "scalar_"]
    if bad:
        raise ConfigError(f"{name}: {bad[0]!r} is not a scalar column name; scalar columns "
                          "are named scalar_* (e.g. drop_scalars=scalar_2)")
    return ",".join(names)


def _at_least(section: Any, minimum: int, *names: str) -> None:
    for name in names:
        if getattr(section, name) < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {getattr(section, name)}")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(allowed)}")


def load_yaml_overrides(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of config keys. Scalars stay strings (``yaml.BaseLoader``) so that
    booleans are parsed by :func:`parse_bool` alone: YAML's own ``on``/``off`` are refused."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: config file not found")
    try:
        data = yaml.load(file.read_text(), Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{file}: not valid YAML{line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of config keys at the top level")
    return data


__all__ = ["ConfigError", "load_yaml_overrides", "parse_bool", "parse_scalar_names",
           "parse_widths"]
