"""How a trial of each kind of own code trains: a :class:`Contract` registered for its class
(:func:`register_contract`). The training function's and the command's are registered here;
:func:`ablations.trial.run.run_trial`, the plan's checks, the provenance and a cluster's
runtime environment ask :func:`contract_of` and never which kind they hold.

A kind of one's own is one file: a frozen dataclass subclassing
:class:`~ablations.config.code.OwnCode` (its name, its keys' dataclass, its metrics) and its
contract registered beside it; ``--model package.module:NAME`` names an object of it, as it
names a training function (docs/architecture.md, "Adding a contract": tests/contract_epochs.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from ablations.config.code import Command, OwnCode, TrainingFunction
from ablations.config.values import ConfigError
from ablations.trial.command import run_command
from ablations.trial.command_fields import unused_key_problem, value_problem
from ablations.trial.own_code import Trial


def _no_text(code: Any) -> str:
    return ""


def _no_problem(code: Any, model: Any) -> Optional[str]:
    return None


def _no_modules(code: Any) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class Contract:
    """How the runner trains a trial of one kind of own code.

    Args:
        fit: ``fit(code, model, trial)``: train one trial of ``code`` with ``model`` (its keys'
            dataclass at the trial's values) through ``trial``
            (:class:`~ablations.trial.own_code.Trial`: seeds, ``report``, ``save`` /
            ``restore``); returns the final metrics (or None: the last reported).
        program: a program of its own, run in the folder the experiment starts in: it ends
            itself at the time limit (no watchdog in the trial's process), and its sources are
            that folder's files and those ``text`` names.
        text: what names the files a program opens (a command's command line).
        problem: why a trial's ``model`` values cannot run (one line), else None; checked
            when the experiment is planned, before any trial starts.
        modules: the modules its trials run beside the one ``--model`` names (a training
            function's own module): their files are its sources, and a cluster's workers get
            them.
    """

    fit: Callable[[Any, Any, Trial], Optional[Mapping[str, Any]]]
    program: bool = False
    text: Callable[[Any], str] = _no_text
    problem: Callable[[Any, Any], Optional[str]] = _no_problem
    modules: Callable[[Any], Sequence[str]] = _no_modules


CONTRACTS: dict[type, Contract] = {}


def register_contract(kind: type, contract: Contract) -> None:
    """Train own code of class ``kind`` (an :class:`~ablations.config.code.OwnCode` subclass,
    and its subclasses without their own) by ``contract``.

    Raises:
        TypeError: ``kind`` is no OwnCode class.
    """
    if not (isinstance(kind, type) and issubclass(kind, OwnCode)):
        raise TypeError(f"{kind!r}: a contract is registered for a subclass of "
                        "ablations.contract.OwnCode")
    CONTRACTS[kind] = contract


def contract_of(code: OwnCode) -> Contract:
    """The contract registered for ``code``'s class or its nearest base.

    Raises:
        ConfigError: none is (a kind whose module registers no contract): one line, before
            any trial starts (the plan's checks ask first).
    """
    for cls in type(code).__mro__:
        if cls in CONTRACTS:
            return CONTRACTS[cls]
    raise ConfigError(f"model {code.name}: no contract is registered for "
                       f"{type(code).__name__}; register one beside it "
                       "(ablations.contract.register_contract)")


def _fit_function(code: TrainingFunction, model: Any, trial: Trial) -> Mapping[str, Any]:
    return code.fit(model, trial)


def _function_modules(code: TrainingFunction) -> Sequence[str]:
    fit = code.fit
    while isinstance(fit, functools.partial):  # partial(train, ...): train's module runs
        fit = fit.func
    module = getattr(fit, "__module__", None)
    return (module,) if module else ()


def _command_text(code: Command) -> str:
    return code.run


def _command_problem(code: Command, model: Any) -> Optional[str]:
    """A value the program cannot receive, or a key changed that its command line never
    names."""
    return value_problem(model) or unused_key_problem(code, model)


register_contract(TrainingFunction, Contract(fit=_fit_function, modules=_function_modules))
register_contract(Command, Contract(fit=run_command, program=True, text=_command_text,
                                    problem=_command_problem))

__all__ = ["CONTRACTS", "Contract", "contract_of", "register_contract"]
