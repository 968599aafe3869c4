"""A design rebuilt from experiment.json: a plug-in design's (designs/registry.py), else the first
design whose record it holds, else a grid.
It imports every design module (the sequential statistics and scipy among them): a resume's
need, not planning's (designs/registry.design_class imports only the design it plans)."""

from __future__ import annotations

from typing import Any

from ablations.experiment.designs.base import Design
from ablations.experiment.designs.factorial import Factorial
from ablations.experiment.designs.table import Table
from ablations.experiment.designs.search import Search
from ablations.experiment.designs.registry import PLUGIN_KEY, design_named
from ablations.experiment.designs.rounds import Rounds
from ablations.experiment.designs.tuned import Tuned

# Each design's record is under its ``record_key``; a grid has none.
RECORDED: tuple[type[Design], ...] = (Tuned, Rounds, Factorial, Search)


def design_from_record(meta: dict[str, Any], root: str) -> Design:
    """The design of the experiment whose experiment.json is ``meta``, in folder ``root``: a
    plug-in design's (its recorded spec imported), else the first built-in whose record
    ``meta`` holds, else a grid.

    Raises:
        UsageError: a plug-in design's module no longer imports (one line).
    """
    design = design_class(meta).from_record(meta, root)
    design.spec = meta.get(PLUGIN_KEY) or None
    return design


def design_class(meta: dict[str, Any]) -> type[Design]:
    """The class of the design experiment.json ``meta`` records, without rebuilding it (a
    plug-in design's module imported).

    Raises:
        UsageError: a plug-in design's module no longer imports (one line).
    """
    spec = meta.get(PLUGIN_KEY)
    if spec:
        return design_named(spec)
    return next((design for design in RECORDED if meta.get(design.record_key)), Table)
