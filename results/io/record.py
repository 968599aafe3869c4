"""The shape of experiment.json's keys that the runner reads back: what
:func:`ablations.results.io.files.read_metadata` checks before ``--resume``, ``report``,
``compare`` or a continuation uses a record, so that a record damaged by hand or a tool is
refused in one line by every reader alike, instead of failing deep inside one of them or, worse,
read with a metric's direction or unit silently dropped.

Only the keys' types and the values the readers branch on are checked; a design's own record
(``search``, ``rounds``, ``factorial``, ...) is its design's to read.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Callable, Mapping, Optional

from ablations.results.io.directions import METRIC_DIRECTION, NO_DIRECTION, direction_key

DIRECTIONS = ("higher", "lower", None)


def record_problem(meta: Mapping[str, Any]) -> Optional[str]:
    """What is wrong with the record ``meta`` (a JSON object), in words naming its key; None
    when every key the runner reads back has its shape."""
    for key, check in CHECKS.items():
        if key not in meta:  # the readers take a missing key as not recorded
            continue
        problem = check(meta[key])
        if problem:
            return f"{key!r} {problem}"
    return _metric_problem(meta)


def _text(value: Any) -> Optional[str]:
    return None if isinstance(value, str) else f"is {_kind(value)}, not text"


def _text_or_null(value: Any) -> Optional[str]:
    return None if value is None else _text(value)


def _number_or_null(value: Any) -> Optional[str]:
    if value is None or (isinstance(value, Real) and not isinstance(value, bool)):
        return None
    return f"is {_kind(value)}, not a number"


def _mapping_of(check: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
    def problem(value: Any) -> Optional[str]:
        if value is None:  # recorded as none (e.g. the built-in model's metrics)
            return None
        if not isinstance(value, dict):
            return f"is {_kind(value)}, not a mapping"
        for name, item in value.items():
            found = check(item)
            if found:
                return f"entry {name!r} {found}"
        return None

    return problem


def _list_of(kind: type, words: str) -> Callable[[Any], Optional[str]]:
    def problem(value: Any) -> Optional[str]:
        if not isinstance(value, list):
            return f"is {_kind(value)}, not a list"
        bad = [item for item in value if not isinstance(item, kind) or isinstance(item, bool)]
        return f"holds {bad[0]!r}, not {words}" if bad else None

    return problem


def _mapping(value: Any) -> Optional[str]:
    return None if isinstance(value, dict) else f"is {_kind(value)}, not a mapping"


def _skipped(value: Any) -> Optional[str]:
    if not isinstance(value, dict) or not isinstance(value.get("config"), dict) \
            or not isinstance(value.get("reason"), str):
        return "is not {config: {...}, reason: text}"
    return None


def _metric(value: Any) -> Optional[str]:
    if not isinstance(value, dict):
        return f"is {_kind(value)}, not {{direction:, unit:}}"
    if value.get("direction") not in DIRECTIONS:
        return f"has direction {value.get('direction')!r}, not higher or lower"
    return _text_or_null(value.get("unit")) and "has a unit that is not text"


def _planned(value: Any) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"is {_kind(value)}, not a mapping"
    for key, check in (("reference", _text_or_null), ("metric", _text_or_null),
                       ("alpha", _number_or_null)):
        found = check(value.get(key))
        if found:
            return f"{key} {found}"
    margin = value.get("margin")
    if margin is not None and _text(margin) and _number_or_null(margin):
        return f"margin is {_kind(margin)}, not a number or text"
    return None


def _metric_problem(meta: Mapping[str, Any]) -> Optional[str]:
    """An experiment's metric the runner does not know (own code's) must have its direction
    recorded: without it the verdicts could not say worse or better."""
    metric = (meta.get("planned") or {}).get("metric")
    if metric is None or metric in (meta.get("metrics") or {}):
        return None
    key = direction_key(metric)
    if key in METRIC_DIRECTION or key in NO_DIRECTION:
        return None
    return (f"'metrics' does not record the direction and unit of the experiment's metric "
            f"{metric!r}")


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


CHECKS: dict[str, Callable[[Any], Optional[str]]] = {
    "space": _text,
    "trials": _mapping_of(_mapping),  # null: --resume refuses it (no trials to rebuild)
    "trial_order": _list_of(str, "a trial's name"),
    "skipped": _mapping_of(_skipped),
    "seeds": _list_of(int, "a seed"),
    "reference": _text_or_null,
    "metrics": _mapping_of(_metric),
    "planned": _planned,
    "design_plugin": _text_or_null,
    "time_limit_s": _number_or_null,
    "started_at": _text_or_null,
    "resumed_at": _list_of(str, "a time"),
    "cpus_per_trial": _number_or_null,
    "gpus_per_trial": _number_or_null,
}

__all__ = ["record_problem"]
