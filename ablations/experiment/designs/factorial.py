"""A two-level factorial design of boolean switches (``--design factorial --factors A,B,...``;
docs/factorial.md): every cell of the design at every seed, run as a grid (:class:`Table`),
the design recorded in experiment.json; the run's summary ends with its main effects and
two-factor interactions (results/stats/factorial.py; :meth:`Factorial.summary_lines`).

:func:`check_request` refuses what the design cannot run; :func:`factorial_trials` expands the
design into trials on one dataset (:meth:`Factorial.prepare` on each).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ablations.config import ALIASES, TrialConfig, apply_overrides
from ablations.experiment.designs.table import Table
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.results.stats.factorial_design import MAX_FACTORS, MIN_FACTORS, FactorialDesign
from ablations.search_spaces import TrialSpec

if TYPE_CHECKING:
    from ablations.config.comparison import Decision
    from ablations.experiment.planning.table_plan import PlanState
    from ablations.search_spaces import Space



def parse_factors(given: Optional[Sequence[str]]) -> list[str]:
    """The factors: boolean config keys (aliases resolved), distinct, 2 to 8."""
    names = [str(part).strip() for part in (given or [])]
    if not names or any(not name for name in names):
        raise UsageError(f"{arg('factors')} {given!r}: give {MIN_FACTORS} to {MAX_FACTORS} "
                         "boolean config keys, e.g. temporal_attention,spatial_attention")
    names = [ALIASES.get(name, name) for name in names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"{arg('factors')}: {repeated[0]} is given twice; each factor once")
    if not MIN_FACTORS <= len(names) <= MAX_FACTORS:
        raise UsageError(f"{arg('factors')}: {len(names)} factor(s); a factorial design takes "
                         f"{MIN_FACTORS} to {MAX_FACTORS} (every cell up to 4, a resolution "
                         "IV or V fraction of 16 cells for 5 to 8)")
    return names


def check_request(args: Request, space: Space) -> None:
    """The flags a factorial design refuses or needs (one line each, before any trial)."""
    if not args.design.factors:
        raise UsageError(f"{arg('design')} factorial needs {arg('factors')} KEY,KEY,... (boolean "
                         f"config keys, {MIN_FACTORS} to {MAX_FACTORS})")
    if space.is_search:
        raise UsageError(f"{arg('design')} factorial: space {space.name} is a search, not an "
                         "ablation table; the reference cell is a table's reference variant "
                         f"(e.g. {arg('space')} components)")
    if args.seeds == "auto":
        raise UsageError(f"{arg('design')} factorial runs every cell at the same fixed seeds; "
                         "give a number of seeds (at least 2), not auto")
    if len(args.seeds) < 2:
        raise UsageError(f"{arg('design')} factorial needs at least 2 seeds: the effects' error is "
                         "estimated from how the cells differ from seed to seed")
    for flag, given in ((arg("only"), args.only), (arg("null_control"), args.null_control),
                        (arg("cross_seeds"), args.cross_seeds)):
        if given:
            raise UsageError(f"{flag} does not combine with {arg('design')} factorial (the design "
                             "names its own cells, each at every seed)")


def factorial_trials(args: Request, space: Space, base: TrialConfig, seeds: Sequence[int],
                     scalar_names: Optional[Sequence[str]] = None
                     ) -> tuple[list[TrialSpec], FactorialDesign]:
    """The design's cells at every seed: the reference cell is ``space``'s reference variant
    (``base`` + its diff); each factor's other level is the negation of its value there."""
    factors = parse_factors(args.design.factors)
    table = space.table(scalar_names, base.data.dropped_scalars)
    where = space.source_file or f"space {space.name}"
    reference = apply_overrides(base, {**table[space.reference], "ablation": space.reference},
                                source=f"{where}, variant {space.reference}")
    values = reference.flat()
    booleans = [key for key, value in values.items() if isinstance(value, bool)]
    levels = []
    for name in factors:
        if name not in values:
            close = difflib.get_close_matches(name, booleans, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"{arg('factors')}: unknown key {name!r}{hint} (the boolean switches: "
                             f"{', '.join(booleans)})")
        if not isinstance(values[name], bool):
            raise UsageError(f"{arg('factors')}: {name} is not a boolean switch (its value is "
                             f"{values[name]!r}); factors are config keys that are true or "
                             f"false: {', '.join(booleans)}")
        levels.append(values[name])
    design = FactorialDesign.plan(factors, levels, space.reference)
    trials = []
    for cell, name in enumerate(design.cells):
        configured = apply_overrides(reference, {**design.cell_overrides(cell), "ablation": name},
                                     source=f"{arg('design')} factorial, cell {name}")
        for seed in seeds:
            config = apply_overrides(configured, {"seed": seed}, source=f"cell {name}")
            trials.append(TrialSpec(f"{name}-seed{seed}", name, int(seed), config))
    return trials, design


class Factorial(Table):
    """Every cell of a two-level factorial design at every seed (a grid); the summary adds its
    effects (:meth:`summary_lines`)."""

    record_key = "factorial"
    asked_by = f"{arg('design')} factorial"
    continues_into_rounds = False  # a design's cells share seeds: no per-cell rounds
    grows = False  # its cells are the factors' combinations, not variants one adds


    def __init__(self, factorial: FactorialDesign) -> None:
        self.factorial = factorial

    @classmethod
    def check_request(cls, request: Request, space: Space) -> None:
        check_request(request, space)

    @classmethod
    def prepare(cls, state: PlanState) -> Factorial:
        """The design's cells at every seed (on each dataset); every cell must run here."""
        designs = []

        def cells(request: Request, space: Space, base: TrialConfig, seeds: Sequence[int],
                  scalar_names: Optional[Sequence[str]], only: Any) -> list[TrialSpec]:
            trials, design = factorial_trials(request, space, base, seeds, scalar_names)
            designs.append(design)
            return trials

        state.plan_table(cells)
        if state.skipped:
            spec, reason = state.skipped[0]
            raise UsageError(f"{arg('design')} factorial: cell {spec.variant} cannot run here "
                             f"({reason}); every cell of the design must run")
        return cls(designs[-1])

    def record(self, metadata: dict[str, Any]) -> None:
        metadata[self.record_key] = self.factorial.to_dict()

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Factorial:
        design = cls(FactorialDesign.from_dict(meta[cls.record_key]))
        design.planned = meta.get("planned")
        return design

    def count_text(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        return (f"{len(trials)} trials ({len(self.factorial.cells)} cells of a "
                f"{self.factorial.label} x {len(seeds)} seeds)")

    def dry_run_lines(self, alpha: float) -> list[str]:
        return self.factorial.lines()

    def summary_lines(self, trials: Any, meta: dict[str, Any],
                      decision: Decision) -> list[str]:
        from ablations.results.stats.analyses import analysis_of
        from ablations.results.stats.factorial import effects_view, factorial_note

        try:
            table = analysis_of(meta).table("effects", trials, decision)
        except (ValueError, KeyError) as exc:
            return ["", f"No factorial effects: {exc}"]
        return ["", f"Factorial effects ({self.factorial.legend()}):",
                effects_view(table).to_string(index=False), "", factorial_note(table)]
