"""The designs asked for with options of their own, as the objects a request carries
(``Request.design``, ``Experiment(design=...)``): the built-in :class:`Factorial`
(``factors``), :class:`Tuned` (the keys each arm is tuned over and its budget) and
:class:`Search` (a search space's trials and scheduler), and a design of one's own whose
``options`` is a :class:`DesignOptions` subclass (tests/design_long.py). A design without
options is asked for otherwise: a table by default, rounds by ``seeds="auto"``, a search by
its space (with :class:`Search`'s defaults), a design of one's own by its registered name.

Each object checks its own values (:meth:`DesignOptions.problems`, named as the library's
arguments, which the command line shows as its flags), names the design it asks for
(:attr:`DesignOptions.kind`: a key of ``registry.BUILT_IN``, or a registered design's name)
and declares its command-line flags (:attr:`DesignOptions.flags`, which the command line
renders and reads back with :func:`options_from`). This module is light: the command line's
parser and planning a grid import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Optional, Sequence

from ablations.experiment.core.request import (
    SCHEDULERS,
    UsageError,
    arg,
    at_least_problem,
    choice_problem,
    names_problem,
    tune_keys_problem,
)


@dataclass(frozen=True)
class Flag:
    """One command-line flag of a design's options: ``--dest-with-dashes`` sets the options'
    ``field`` (the dest by default). The command line renders it (cli/flags.py) as a flag of
    ``run``; its value is an integer >= ``at_least``, one of ``choices``, a list of names
    (``names``: NAME,NAME,...) or else text."""

    dest: str
    help: str
    field: Optional[str] = None
    metavar: Optional[str] = None
    at_least: Optional[int] = None
    choices: Optional[tuple[str, ...]] = None
    names: bool = False
    default: Any = None  # the default the help shows; a flag not given leaves the field's

    @property
    def field_name(self) -> str:
        return self.field or self.dest


@dataclass(frozen=True)
class DesignOptions:
    """A design asked for with its options: a built-in's, or the ``options`` of a design of
    one's own (its :attr:`kind` that design's registered name)."""

    kind: ClassVar[str]  # the design it asks for (registry.BUILT_IN's key, or a plug-in's name)
    flags: ClassVar[tuple[Flag, ...]] = ()  # its command-line flags, in the help's order
    # how a refusal names what asks for it on the command line (arg() marks a flag)
    asked_text: ClassVar[str] = ""

    def problems(self) -> dict[str, Optional[str]]:
        """Each option's problem (None: none), by the library's argument name."""
        return {}

    def given(self) -> set[str]:
        """The argument names of the options given (a resume refuses those that would change
        the recorded plan)."""
        return {"design"}

    @classmethod
    def title(cls) -> str:
        """The heading of its flags in ``run --help``."""
        return f"design {cls.kind}"

    @classmethod
    def asks(cls, design: str, given: set[str]) -> bool:
        """Whether a command line asks for this design: ``--design`` names it, by default;
        ``given``: the dests of the flags it gave."""
        return design == cls.kind

    @classmethod
    def from_flags(cls, given: dict[str, Any],
                   split: Callable[[Any], Any] = lambda value: value) -> DesignOptions:
        """The options of the flags ``given`` (by dest); a flag not given leaves its field's
        default. ``split``: how a list flag's text becomes its names."""
        return cls(**{flag.field_name: split(given[flag.dest]) if flag.names else given[flag.dest]
                      for flag in cls.flags if flag.dest in given})


@dataclass(frozen=True)
class Factorial(DesignOptions):
    """A two-level factorial design over ``factors``, boolean config keys (docs/factorial.md)."""

    factors: Optional[Sequence[str]] = None
    kind: ClassVar[str] = "factorial"
    asked_text: ClassVar[str] = f"{arg('design')} factorial"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("factors", metavar="KEY,KEY,...", names=True,
             help="with --design factorial (required there): 2 to 8 boolean config keys (e.g. "
             "temporal_attention,spatial_attention,use_scalars); each factor's other level is "
             "the negation of its value in the reference cell; every cell up to 4 factors, a "
             "16-cell resolution IV (or V) fraction for 5 to 8 (default: none)"),
    )

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
    asked_text: ClassVar[str] = arg("tune_each")
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("tune_each", field="each", metavar="KEY,KEY,...", names=True,
             help="tuned ablations: tune every arm's KEYs (e.g. lr,weight_decay; the hpo "
             "space's ranges) with the same Optuna budget on a tuning seed, then evaluate each "
             "at its own best beside the table at the configuration given (docs/tuned.md; "
             "default: none, no tuning)"),
        Flag("tune_budget", field="budget", metavar="N", at_least=1, default=8,
             help="with --tune-each: search trials per arm"),
    )

    def problems(self) -> dict[str, Optional[str]]:
        return {"tune_each": tune_keys_problem(self.each) if self.each is not None
                else "give the keys every arm is tuned over, e.g. ['lr']",
                "tune_budget": at_least_problem(self.budget, 2)}

    def given(self) -> set[str]:
        return {"tune_each", "tune_budget"}

    @classmethod
    def asks(cls, design: str, given: set[str]) -> bool:
        return "tune_each" in given


@dataclass(frozen=True)
class Search(DesignOptions):
    """A search space's trials (``num_samples`` sampled configurations) and its scheduler
    (``asha`` stops poor trials early, ``fifo`` runs each to the end; None: asha)."""

    num_samples: int = 16
    scheduler: Optional[Literal["asha", "fifo"]] = None
    kind: ClassVar[str] = "search"
    asked_text: ClassVar[str] = f"{arg('num_samples')} or {arg('scheduler')} (a search's)"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("num_samples", metavar="N", at_least=1, default=16,
             help="trials to sample in a search space such as hpo"),
        Flag("scheduler", choices=SCHEDULERS,
             help="trial scheduler of a search space; ablation spaces run every trial to the "
             "same budget and refuse one (default: asha for hpo)"),
    )

    def problems(self) -> dict[str, Optional[str]]:
        return {"num_samples": at_least_problem(self.num_samples, 1),
                "scheduler": None if self.scheduler is None
                else choice_problem(self.scheduler, SCHEDULERS)}

    def given(self) -> set[str]:
        return {"num_samples", *(["scheduler"] if self.scheduler is not None else [])}

    @classmethod
    def asks(cls, design: str, given: set[str]) -> bool:
        return bool({flag.dest for flag in cls.flags} & given)


@dataclass(frozen=True)
class Rounds(DesignOptions):
    """Seeds in rounds (docs/verdicts.md): with ``seeds="auto"``, a pilot of ``pilot`` seeds
    (None: 3), then more seeds only for the variants without a verdict, up to ``max_seeds``
    (None: 10); with fixed seeds, ``max_seeds`` plans the rounds the table may be continued
    into (the fixed seeds are their pilot look). ``Seeds("auto")`` alone asks for the rounds
    at these defaults."""

    pilot: Optional[int] = None
    max_seeds: Optional[int] = None
    kind: ClassVar[str] = "rounds"
    asked_text: ClassVar[str] = f"{arg('pilot')} or {arg('max_seeds')} (rounds of seeds)"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag("pilot", metavar="N", at_least=2,
             help="with --seeds auto: seeds of the first round (default: 3)"),
        Flag("max_seeds", metavar="N", at_least=2,
             help="at most N seeds per variant (default: 10): with --seeds auto the last look; "
             "with fixed seeds (a plain table) the last look of the design whose pilot they "
             "are (--seeds 3 --max-seeds 3: final verdicts at full alpha; docs/verdicts.md)"),
    )

    def problems(self) -> dict[str, Optional[str]]:
        return {"pilot": at_least_problem(self.pilot, 2),
                "max_seeds": at_least_problem(self.max_seeds, 2)}

    def given(self) -> set[str]:
        return {name for name in ("pilot", "max_seeds") if getattr(self, name) is not None}

    @classmethod
    def asks(cls, design: str, given: set[str]) -> bool:
        return bool({flag.dest for flag in cls.flags} & given)


BUILT_IN_OPTIONS: tuple[type[DesignOptions], ...] = (Factorial, Tuned, Search, Rounds)


def rounds_of(design: object) -> Rounds:
    """The rounds' options of a request's ``design``: its own where it is :class:`Rounds`,
    else the defaults (no pilot and no most seeds given)."""
    return design if isinstance(design, Rounds) else Rounds()


def names_own_design(design: str) -> bool:
    """Whether ``--design``'s ``design`` names a design of one's own: not a table, nor the
    factorial design (the built-ins it names; the others are asked for by their flags)."""
    return design not in ("table", Factorial.kind)


def options_from(design: str, given: dict[str, Any],
                 split: Callable[[Any], Any] = lambda value: value,
                 own: Optional[type[DesignOptions]] = None) -> object:
    """The design a command line asks for: ``design`` (``--design``: table, factorial or a
    design of one's own, whose options class is ``own``, None where it has none) and the
    designs' option flags ``given`` (by dest), as the asked design's options object; a design
    of one's own without options by its name; None where planning chooses (a table, rounds or
    a space's search). ``split``: how a list flag's text becomes its names.

    Raises:
        UsageError: a design's flag without what asks for its design, or two designs asked.
    """
    for options in BUILT_IN_OPTIONS:  # own's flags are there only when --design names it
        flags = [flag.dest for flag in options.flags if flag.dest in given]
        if flags and not options.asks(design, set(given)):
            raise UsageError(f"{arg(flags[0])} applies with {options.asked_text} only")
    asked = [options for options in BUILT_IN_OPTIONS if options.asks(design, set(given))]
    texts = [*([f"{arg('design')} {design}"] if design != "table" else []),
             *(options.asked_text for options in asked if options.kind != design)]
    if len(texts) > 1:
        raise UsageError(f"{' and '.join(texts)} each ask for another design; give one")
    if names_own_design(design):  # a design of one's own, by its name or with its options
        return design if own is None else own.from_flags(given, split)
    return asked[0].from_flags(given, split) if asked else None
