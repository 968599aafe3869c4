"""Trackers by name: what ``--log-to NAME[:TARGET]`` (``log_to=["NAME:TARGET"]``) makes, and
the protocol the object it makes follows.

A tracker is a Ray Tune callback (``ray.tune.Callback``; Ray's ``LoggerCallback`` hands it each
trial's start, results and end) that the runner adds to the Tuner, with the three members of
:class:`Tracker`. A kind is registered once under its name (:func:`register_tracker`): in the
process (a notebook, a test), or for the command line by an installed package's entry point in
the group ``ablations.trackers`` that names its :class:`TrackerKind`::

    [project.entry-points."ablations.trackers"]
    mine = "my_package.tracking:KIND"

MLflow and W&B are registered so (ablations/experiment/trackers/specs.py); a tracker of one's
own in four methods: :class:`ablations.experiment.trackers.trials.TrialTracker`
(docs/trackers.md, "A tracker of one's own").
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, runtime_checkable

ENTRY_POINTS = "ablations.trackers"


@runtime_checkable
class Tracker(Protocol):
    """What the runner asks of a tracker's callback beyond Tune's hooks."""

    errors: tuple[type[BaseException], ...]  # what ``publish`` may raise: a warning, not a stop

    def describe(self) -> str:
        """One line on where the runs go (printed as the run starts)."""

    def publish(self, files: dict[str, str], verdicts: Any, across: Any = None) -> None:
        """The experiment's verdicts after the run: ``files`` (summary.txt, verdicts.csv,
        verdicts.md), the verdict table (None: none), over datasets the table across them."""


def _same(target: str, text: str) -> str:
    return target


def _none(root: str) -> str:
    return ""


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class TrackerKind:
    """A kind of tracker: ``make(target=, root=, experiment=, space=)`` returns its callback
    (a :class:`Tracker`) for the experiment at ``root``; ``usage`` how its value is written
    (``mlflow[:TRACKING_URI]``); ``package`` the module that must be installed (None: none)
    and ``install`` pip's argument that installs it (default: ``package``);
    ``target(target, text)`` checks and resolves a given target as ``--log-to`` is read
    (raises ValueError, one line); ``default(root)`` the target where none is given;
    ``check()`` runs before any trial starts (raises ``UsageError``: e.g. no credentials)."""

    name: str
    make: Callable[..., Any]
    usage: str = ""
    package: Optional[str] = None
    install: str = ""
    target: Callable[[str, str], str] = _same
    default: Callable[[str], str] = _none
    check: Callable[[], None] = _nothing

    def not_installed(self) -> Optional[str]:
        """What is missing for this tracker to log, with how to install it (None: nothing)."""
        if self.package and importlib.util.find_spec(self.package) is None:
            return f"the {self.package} package is not installed; " \
                f"pip install {self.install or self.package}"
        return None


TRACKERS: dict[str, TrackerKind] = {}


def register_tracker(kind: TrackerKind) -> TrackerKind:
    """Make ``kind`` the tracker ``--log-to`` / ``log_to`` call ``kind.name``; returns it."""
    if not kind.name.isidentifier():
        raise ValueError(f"tracker name {kind.name!r}: use letters, digits and _")
    TRACKERS[kind.name] = kind
    return kind


def tracker_kind(name: str) -> TrackerKind:
    """The kind registered as ``name``, else the one an installed entry point names.

    Raises:
        ValueError: one line naming the kinds there are (the caller adds the value).
    """
    if name in TRACKERS:
        return TRACKERS[name]
    found = [point for point in importlib.metadata.entry_points(group=ENTRY_POINTS)
             if point.name == name]
    if found:
        kind = found[0].load()
        if not isinstance(kind, TrackerKind):
            raise ValueError(f"the entry point {ENTRY_POINTS}:{name} ({found[0].value}) is "
                             "not a TrackerKind")
        return register_tracker(kind)
    installed = [point.name for point in importlib.metadata.entry_points(group=ENTRY_POINTS)]
    known = [TRACKERS[key].usage or key for key in TRACKERS] + \
        [key for key in dict.fromkeys(installed) if key not in TRACKERS]
    if not known:
        raise ValueError("no tracker is registered (docs/trackers.md)")
    usage = " or ".join([", ".join(known[:-1]), known[-1]] if len(known) > 1 else known)
    raise ValueError(f"use {usage} (or a tracker of one's own, registered: docs/trackers.md)")


__all__ = ["ENTRY_POINTS", "TRACKERS", "Tracker", "TrackerKind", "register_tracker",
           "tracker_kind"]
