"""Designs of one's own, chosen by ``--design NAME`` (the library's ``design=``): a subclass of
:class:`~ablations.experiment.designs.base.Design` registered under its ``name``
(:func:`register_design`), or named as ``package.module:Class`` (imported from the folder the
command starts in, an installed package or PYTHONPATH, like ``--model``; importing it
registers it). :func:`design_class` is the one place a request's kind is read: a plug-in, a
factorial design, tuned ablations, a search, rounds or a grid.

A plug-in design refuses what it cannot run (:meth:`Design.check_request`), plans from the
request (:meth:`Design.plan`), runs and records itself like any design; experiment.json keeps
its spec under :data:`PLUGIN_KEY`, so that a resume rebuilds it and ``report`` finds its
analysis (:func:`ablations.results.stats.analyses.analysis_of` imports the module) in a
later process. docs/architecture.md's "Adding a design" is tests/design_long.py.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Optional

from ablations.experiment.core.request import Request, UsageError, arg
from ablations.results.io.files import DESIGN_PLUGIN_KEY as PLUGIN_KEY  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from ablations.experiment.designs.base import Design
    from ablations.search_spaces import Space

# the built-in designs, by the kind of run that asks for them (options.py's DesignOptions.kind);
# only the chosen one's module is imported (the rounds and the stages load scipy, which
# planning a grid does not need)
BUILT_IN = {"factorial": "ablations.experiment.designs.factorial:Factorial",
            "tuned": "ablations.experiment.designs.tuned:Tuned",
            "search": "ablations.experiment.designs.search:Search",
            "rounds": "ablations.experiment.designs.rounds:Rounds",
            "table": "ablations.experiment.designs.table:Table"}

SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")

REGISTERED: dict[str, type[Design]] = {}


def register_design(design: type[Design], *, analysis: Optional[type] = None,
                    report: Optional[type] = None) -> type[Design]:
    """Make ``design`` choosable as ``--design`` its ``name`` (usable as a class decorator),
    with its results side and its report's: ``analysis`` (an
    :class:`~ablations.results.stats.analysis_table.Analysis` subclass of the same name and
    record key, which ``report`` and ``compare`` read its experiments with) and ``report``
    (a :class:`~ablations.results.report.designs.DesignReport` subclass), one registration for
    the three.

    Raises:
        ValueError: it has no name or record key, or takes a built-in's or another's; an
            ``analysis`` under another name or record key; a ``report`` without an analysis.
    """
    if not design.name or not design.record_key:
        raise ValueError(f"{design.__name__}: a registered design needs a name and a "
                         "record_key (experiment.json's key of its record)")
    if design.name in BUILT_IN or design.record_key in BUILT_IN:
        raise ValueError(f"{design.__name__}: {design.name!r} or its record key "
                         f"{design.record_key!r} is a built-in design's")
    for name, known in REGISTERED.items():
        if known is not design and (name == design.name or known.record_key == design.record_key):
            raise ValueError(f"{design.__name__}: {known.__name__} has the name "
                             f"{design.name!r} or the record key {design.record_key!r}")
    if analysis is not None and (analysis.name, analysis.record_key) != (design.name,
                                                                          design.record_key):
        raise ValueError(f"{analysis.__name__}: a design's analysis has its name and record key "
                         f"({design.name!r}, {design.record_key!r})")
    if report is not None and analysis is None:
        raise ValueError(f"{report.__name__}: a design's report is registered with its analysis")
    REGISTERED[design.name] = design
    if analysis is not None:
        from ablations.results.report.designs import register_report
        from ablations.results.stats.analyses import register_analysis

        register_analysis(analysis)
        if report is not None:
            register_report(analysis, report)
    return design


def is_plugin(design: object) -> bool:
    """Whether ``design`` (a Request's) asks for a plug-in design rather than a built-in: by
    its name, or with its options (a DesignOptions whose kind is no built-in's)."""
    return isinstance(design, str) or (design is not None
                                       and getattr(design, "kind", None) not in BUILT_IN)


def plugin_named(design: object) -> type[Design]:
    """The plug-in design a Request's ``design`` asks for (:func:`is_plugin`): by its name or
    spec, or the registered design its options' kind names."""
    return design_named(design if isinstance(design, str) else design.kind)  # type: ignore[attr-defined]


def design_class(request: Request, space: Space) -> type[Design]:
    """The design ``request`` asks for on ``space``: a plug-in (``--design NAME``), a
    built-in with its options (core/design_options.py: a factorial design, tuned ablations, a
    search's trials), a search (a search space), rounds (``--seeds auto``, with the rounds'
    options or without), else a grid of fixed seeds (with the rounds' options: the rounds it
    plans to be continued into). Each refuses the rest of the request it cannot run
    (:meth:`Design.check_request`)."""
    if is_plugin(request.design):
        return plugin_named(request.design)
    kind = request.design.kind if request.design is not None else None
    if kind in (None, "rounds"):  # the rounds' options leave it to the space and the seeds
        kind = "search" if space.is_search else "rounds" if request.seeds == "auto" else "table"
    module, _, name = BUILT_IN[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def design_named(spec: str) -> type[Design]:
    """The plug-in design ``spec`` names (a registered name or ``package.module:Class``).

    Raises:
        UsageError: one line: a module that does not import, a name it lacks, a class that
            is not a Design.
    """
    from ablations.config.plugins import import_failure
    from ablations.experiment.designs.base import Design

    if spec in REGISTERED:
        return REGISTERED[spec]
    if spec in BUILT_IN:  # asked for with its options, or by the request's other fields
        raise UsageError(f"{arg('design')} {spec!r}: a built-in design is asked for with its "
                         "options: design=Factorial(factors=[...]), Tuned(each=[...]) or "
                         "Search(...) (ablations.Factorial, ...)")
    if not SPEC.fullmatch(spec):
        known = ["table", "factorial", *REGISTERED]
        raise UsageError(f"{arg('design')} {spec!r}: choose one of {', '.join(known)}, or name "
                         "a design of your own as package.module:Class")
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{arg('design')} {spec!r}: cannot import {module_name} ({exc}); is it "
                         "in the folder the command starts in, installed, or on PYTHONPATH?"
                         ) from None
    except Exception as exc:  # the module's own code failed while it was imported
        raise UsageError(f"{arg('design')} {spec!r}: importing {module_name} failed: "
                         f"{import_failure(exc)}; fix the module and run again") from None
    design = getattr(module, attribute, None)
    if not (isinstance(design, type) and issubclass(design, Design)):
        raise UsageError(f"{arg('design')} {spec!r}: {module_name}.{attribute} is not a "
                         "subclass of ablations.Design")
    try:
        return register_design(design)
    except ValueError as exc:
        raise UsageError(f"{arg('design')} {spec!r}: {exc}") from None
