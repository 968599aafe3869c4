"""The value types of the command line's flags: each parses one flag's text or refuses a bad
value in one line (argparse's error, exit code 2) before anything runs, with the library's
checks (ablations/experiment/core/request.py) where the library takes the same value."""

from __future__ import annotations

import argparse
import math
import re
from typing import Optional

from ablations.config import ConfigError, parse_bool, parse_seed_sources
from ablations.experiment.core.request import alpha_problem, margin_problem, rate_of, rate_problem


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def resource(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def duration(text: str) -> float:
    """A time limit: seconds, or ``90s``, ``15m``, ``2h`` (ablations/trial/time_limit.py)."""
    from ablations.trial.time_limit import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seeds_flag(text: str) -> list[int] | str:
    """``3`` means seeds 0,1,2; ``0,5,7`` is an explicit list; ``auto``: in rounds."""
    text = text.strip()
    if text == "auto":
        return text
    try:
        if "," in text:
            seeds = [int(part) for part in text.split(",") if part.strip()]
        else:
            count = int(text)
            if count < 1:
                raise argparse.ArgumentTypeError(f"{text!r}: the number of seeds must be >= 1")
            seeds = list(range(count))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count (3), a list of seeds (0,1,2) or auto"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds must be distinct integers >= 0")
    return seeds


def seed_sources_flag(text: str) -> str:
    """The sources of randomness that vary with the seed: init, order, data, or none."""
    try:
        return parse_seed_sources(text, name="--seed-sources")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--seed-sources: ")) from None


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def bool_flag(text: str) -> bool:
    try:
        return parse_bool(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def margin_flag(text: str) -> str:
    """An equivalence margin flag: ``0.02`` (metric units) or ``5%`` (of the reference's mean)."""
    return _checked(text, margin_problem(text))


def metric_flag(text: str) -> str:
    """A metric's name; planning checks it against the model's metrics (the built-in
    model's columns, or the metrics own code declares)."""
    return _checked(text, None if re.fullmatch(r"[A-Za-z_]\w*", text) else
                    f"{text!r} is not a metric name")


def rate_flag(text: str) -> float:
    """A rate in (0, 1): ``0.1`` or ``10%``."""
    value = rate_of(text)
    _checked(text, None if rate_problem(value) is None else f"{text!r}: must be a rate in (0, "
             "1), e.g. 0.1 or 10%")
    return value


def alpha_flag(text: str) -> float:
    """A family-wise error rate in (0, 0.5)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    _checked(text, None if alpha_problem(value) is None else alpha_problem(text))
    return value


def _checked(text: str, problem: Optional[str]) -> str:
    """``text``, or argparse's error with ``problem`` (the library's check, request.py)."""
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def log_to_flag(text: str):
    """A tracker, ``mlflow[:TRACKING_URI]`` or ``wandb[:PROJECT]``
    (ablations/experiment/trackers/specs.py)."""
    from ablations.experiment.trackers.specs import parse_log_to

    try:
        return parse_log_to(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
