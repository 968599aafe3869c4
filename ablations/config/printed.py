"""Metrics a program prints: each declared metric's pattern, read from the lines of its stdout.

Most published training scripts print their metrics as text (``| end of epoch   2 | ... |
valid ppl   894.16``, ``step 100: train loss 2.83, val loss 2.81``) and write no JSON. A
command's metric declares where its value is printed, in the space file::

    metrics:
      valid_ppl:
        direction: lower
        printed: 'end of epoch +(?P<epoch>\\d+) .*valid ppl +(?P<value>\\S+)'
      test_ppl: {direction: lower, printed: 'End of training .*test ppl +(?P<value>\\S+)'}
      val_loss: {direction: lower, printed: true}   # val_loss=0.31, val_loss: 0.31, val loss: 0.31

The pattern is a Python regular expression searched in each line; its group ``value`` (or
the metric's own name) is the number, its group ``epoch``, where it has one, the point's
epoch (else the match's ordinal: the third match is epoch 3). ``printed: true`` is
:func:`default_pattern`: the name (an underscore also matching a space), ``=`` or ``:``, a
number. Every match is a point of the metric's curve, the last its final value, as Guild AI
reads a run's output scalars and Kubeflow Katib's StdOut collector its ``name=value`` lines.
:class:`PrintedMetrics` turns lines into those points (ablations/trial/command.py feeds it the
program's stdout as it runs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ablations.config.values import ConfigError

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"


def default_pattern(name: str) -> str:
    """``name=value`` or ``name: value`` (an underscore of the name also matching a space),
    the name not part of a longer one."""
    words = r"[_ ]".join(re.escape(word) for word in name.split("_"))
    return rf"(?<![\w.]){words}\s*[:=]\s*(?P<value>{NUMBER})(?![\w.])"


def printed_pattern(name: str, declared: Any, *, source: str) -> str:
    """The regular expression of metric ``name``'s ``printed:`` (``True``: the default), checked:
    it compiles, and has a group ``value`` or named as the metric; a group ``epoch`` is
    optional.

    Raises:
        ConfigError: one line naming the problem and the fix.
    """
    example = (f"e.g. {name}: {{direction: lower, printed: '{name.replace('_', ' ')} "
               r"+(?P<value>\S+)'}, or printed: true for " f"{name}=0.5 and {name}: 0.5")
    if declared is True or (isinstance(declared, str) and declared.strip().lower() == "true"):
        return default_pattern(name)  # a space file's YAML reaches here as text
    if not isinstance(declared, str) or not declared.strip():
        raise ConfigError(f"{source}: {name}: printed: {declared!r} is not a pattern; {example}")
    try:
        compiled = re.compile(declared)
    except re.error as exc:
        raise ConfigError(f"{source}: {name}: printed: {declared!r} is not a regular expression "
                          f"({exc}); {example}") from None
    if "value" not in compiled.groupindex and name not in compiled.groupindex:
        raise ConfigError(f"{source}: {name}: printed: {declared!r} has no group for the "
                          f"number; name it (?P<value>...) or (?P<{name}>...); {example}")
    return declared


@dataclass
class PrintedMetrics:
    """The points of printed metrics, from the lines of a program's output in order.

    :meth:`feed` takes a line and returns the epochs it completed, each ``(epoch, {metric:
    value})`` to report; :meth:`finish` the last epoch's. An epoch completes when a point of a
    later epoch arrives. A point of an epoch already reported (a metric printed once at the
    end, its ordinal 1) is no point of the curve: it is only a final value. :attr:`final` holds
    each metric's last value."""

    patterns: Mapping[str, str]
    final: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # matches so far, by metric
    last_reported: int = 0
    pending_epoch: Optional[int] = None
    pending: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compiled = {name: re.compile(pattern) for name, pattern in self.patterns.items()}

    def feed(self, line: str) -> list[tuple[int, dict[str, float]]]:
        done = []
        for name, pattern in self.compiled.items():
            match = pattern.search(line)
            if match is None:
                continue
            value = _number(match.group(name if name in pattern.groupindex else "value"), name,
                            line)
            self.counts[name] = self.counts.get(name, 0) + 1
            self.final[name] = value
            epoch = (_epoch(match.group("epoch"), name, line) if "epoch" in pattern.groupindex
                     and match.group("epoch") is not None else self.counts[name])
            if epoch <= self.last_reported:
                continue  # printed after its epoch was reported: a final value only
            if self.pending_epoch is not None and epoch > self.pending_epoch:
                done.append(self._flush())
            if self.pending_epoch is None:
                self.pending_epoch = epoch
            if epoch == self.pending_epoch:
                self.pending[name] = value
        return done

    def finish(self) -> list[tuple[int, dict[str, float]]]:
        return [self._flush()] if self.pending_epoch is not None else []

    def unmatched(self) -> list[str]:
        """The metrics no line matched."""
        return [name for name in self.patterns if name not in self.counts]

    def _flush(self) -> tuple[int, dict[str, float]]:
        point = (int(self.pending_epoch), dict(self.pending))
        self.last_reported, self.pending_epoch, self.pending = point[0], None, {}
        return point


class PrintedValueError(ValueError):
    """A printed metric's match that is no number or no epoch."""


def _number(text: Optional[str], name: str, line: str) -> float:
    try:
        return float(text)  # nan and inf read as such: a non-finite value diverges the trial
    except (TypeError, ValueError):
        raise PrintedValueError(f"metric {name}: its pattern matched {text!r}, not a number, "
                                f"in the line {line.strip()[:120]!r}") from None


def _epoch(text: str, name: str, line: str) -> int:
    try:
        epoch = float(text)
    except ValueError:
        epoch = math.nan
    if not (math.isfinite(epoch) and epoch.is_integer() and epoch >= 1):
        raise PrintedValueError(f"metric {name}: its pattern's epoch {text!r} is not a whole "
                                f"number from 1 up, in the line {line.strip()[:120]!r}")
    return int(epoch)


__all__ = ["NUMBER", "PrintedMetrics", "PrintedValueError", "default_pattern",
           "printed_pattern"]
