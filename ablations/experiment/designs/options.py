"""The built-in designs asked for with options of their own, as the objects a request
carries (``Request.design``, ``Experiment(design=...)``): :class:`Factorial` (``factors``),
:class:`Tuned` (the keys each arm is tuned over and its budget) and :class:`Search` (a search
space's trials and scheduler). A design without options is asked for otherwise: a table by
default, rounds by ``seeds="auto"``, a search by its space (with :class:`Search`'s
defaults), a design of one's own by its registered name.

Each object checks its own values (:meth:`DesignOptions.problems`, named as the library's
arguments, which the command line shows as its flags) and names the built-in design it asks
for (:attr:`DesignOptions.kind`, a key of ``registry.BUILT_IN``). This module is light: the
command line's parser and planning a grid import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Optional, Sequence

from ablations.experiment.request import (
    SCHEDULERS,
    UsageError,
    arg,
    at_least_problem,
    choice_problem,
    names_problem,
    tune_keys_problem,
)


@dataclass(frozen=True)
class DesignOptions:
    """A built-in design asked for with its options."""

    kind: ClassVar[str]  # the design it asks for (registry.BUILT_IN's key)

    def problems(self) -> dict[str, Optional[str]]:
        """Each option's problem (None: none), by the library's argument name."""
        return {}

    def given(self) -> set[str]:
        """The argument names of the options given (a resume refuses those that would change
        the recorded plan)."""
        return set()


@dataclass(frozen=True)
class Factorial(DesignOptions):
    """A two-level factorial design over ``factors``, boolean config keys (docs/factorial.md)."""

    factors: Optional[Sequence[str]] = None
    kind: ClassVar[str] = "factorial"

    def problems(self) -> dict[str, Optional[str]]:
        return {"factors": names_problem(self.factors)}

    def given(self) -> set[str]:
        return {"design", *(["factors"] if self.factors is not None else [])}


@dataclass(frozen=True)
class Tuned(DesignOptions):
    """Tuned ablations (docs/tuned.md): every arm tuned over the keys ``each`` with the same
    ``budget`` of search trials, then each evaluated at its own best."""

    each: Optional[Sequence[str]] = None
    budget: int = 8
    kind: ClassVar[str] = "tuned"

    def problems(self) -> dict[str, Optional[str]]:
        return {"tune_each": tune_keys_problem(self.each) if self.each is not None
                else "give the keys every arm is tuned over, e.g. ['lr']",
                "tune_budget": at_least_problem(self.budget, 2)}

    def given(self) -> set[str]:
        return {"tune_each", "tune_budget"}


@dataclass(frozen=True)
class Search(DesignOptions):
    """A search space's trials (``num_samples`` sampled configurations) and its scheduler
    (``asha`` stops poor trials early, ``fifo`` runs each to the end; None: asha)."""

    num_samples: int = 16
    scheduler: Optional[Literal["asha", "fifo"]] = None
    kind: ClassVar[str] = "search"

    def problems(self) -> dict[str, Optional[str]]:
        return {"num_samples": at_least_problem(self.num_samples, 1),
                "scheduler": None if self.scheduler is None
                else choice_problem(self.scheduler, SCHEDULERS)}

    def given(self) -> set[str]:
        return {"num_samples", *(["scheduler"] if self.scheduler is not None else [])}


def options_from(design: str, given: dict[str, Any],
                 split: Callable[[Any], Any] = lambda value: value) -> object:
    """The design a command line asks for: ``design`` (``--design``: table, factorial or a
    design of one's own) and the designs' option flags ``given`` (``factors``,
    ``tune_each`` with ``tune_budget``, a search's ``num_samples`` and ``scheduler``), each
    group as its options' object; None where planning chooses (a table, rounds or a space's
    search). ``split``: how a list flag's text becomes its names.

    Raises:
        UsageError: a group's flag without the flag that asks for its design, or two groups.
    """
    if "factors" in given and design != "factorial":
        raise UsageError(f"{arg('factors')} applies with {arg('design')} factorial only")
    if "tune_budget" in given and "tune_each" not in given:
        raise UsageError(f"{arg('tune_budget')} applies with {arg('tune_each')} only")
    searched = {"num_samples", "scheduler"} & set(given)
    asked = [*([f"{arg('design')} {design}"] if design != "table" else []),
             *([arg("tune_each")] if "tune_each" in given else []),
             *([f"{arg('num_samples')} or {arg('scheduler')} (a search's)"] if searched else [])]
    if len(asked) > 1:
        raise UsageError(f"{' and '.join(asked)} each ask for another design; give one")
    if design == "factorial":
        return Factorial(factors=split(given.get("factors")))
    if design != "table":
        return design  # a design of one's own, by its name
    if "tune_each" in given:
        return Tuned(each=split(given["tune_each"]), budget=given.get("tune_budget", 8))
    if searched:
        return Search(num_samples=given.get("num_samples", 16), scheduler=given.get("scheduler"))
    return None
