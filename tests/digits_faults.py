"""The digits examples' training functions with one trial that fails part-way, for the tests
that retry it from its saved epoch (tests/test_own_code_runs.py).

``DIGITS`` (examples/digits/fit.py) and ``DIGITS_LIGHTNING``
(examples/digits/lightning_module.py) are the examples' own TrainingFunctions, their name,
config and metrics unchanged, with a ``fit`` that runs the example's ``fit`` and makes the
trial :data:`FAILING` raise :class:`InjectedFailure` right after its ``trial.save`` of epoch
:data:`FAIL_AFTER_EPOCH`, only in a run that did not continue from a saved state (so that a
retry or a resume gets past it). :data:`SPEC_OF` maps each example's spec (its space file's
``model:``) to this module's.

Tests run from the checkout's root, so ``tests`` imports on a local Ray's workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ablations.contract import TrainingFunction

FAILING = "baseline-seed1"  # the trial that fails, once
FAIL_AFTER_EPOCH = 10  # ... right after saving this epoch
SPEC_OF = {
    "examples.digits.fit:DIGITS": f"{__name__}:DIGITS",
    "examples.digits.lightning_module:DIGITS_LIGHTNING": f"{__name__}:DIGITS_LIGHTNING",
}


class InjectedFailure(RuntimeError):
    """Raised on purpose after the failing trial's save of epoch FAIL_AFTER_EPOCH."""


def failing_once(code: TrainingFunction) -> TrainingFunction:
    """``code`` with a ``fit`` whose trial :data:`FAILING` fails once (module docstring)."""
    inner = code.fit

    def fit(config: Any, trial: Any) -> Any:
        if trial.name == FAILING and trial.start_epoch == 0:  # a run from the first epoch
            save = trial.save

            def save_then_fail(state: Any) -> None:
                save(state)
                if trial.last_epoch == FAIL_AFTER_EPOCH:
                    raise InjectedFailure(f"injected failure after saving epoch "
                                          f"{FAIL_AFTER_EPOCH} of {trial.name}")

            trial.save = save_then_fail  # what the example's fit (and fit_lightning) calls
        return inner(config, trial)

    return dataclasses.replace(code, fit=fit)


def _digits() -> TrainingFunction:
    from examples.digits.fit import DIGITS

    return failing_once(DIGITS)


def _digits_lightning() -> TrainingFunction:
    from examples.digits.lightning_module import DIGITS_LIGHTNING

    return failing_once(DIGITS_LIGHTNING)


_MADE = {"DIGITS": _digits, "DIGITS_LIGHTNING": _digits_lightning}


def __getattr__(name: str) -> TrainingFunction:
    """Each one made on first use: a process that runs the function does not import
    Lightning (seconds of CPU)."""
    if name not in _MADE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = globals()[name] = _MADE[name]()
    return made
