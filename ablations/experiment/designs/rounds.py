"""``--seeds auto``: an ablation table run in rounds, seeds added only where they decide.

Round 1 (the pilot) runs every variant at the design's first ``n_1`` seeds. After each round,
:func:`ablations.results.stats.sequential_table.sequential_verdict_table` gives every variant its
verdict so far; the variants still ``inconclusive`` (with at least two ok or diverged trials) and
the reference run the next look's seeds as the next round; a variant with a verdict stops. The
design (looks, α shares) is fixed before the pilot and recorded in experiment.json
(``rounds``), with each round's trials and Tune folder (``tune`` for the pilot,
``tune-round<k>`` after), so ``--resume`` continues the round a stop cut short and then decides
exactly as an uninterrupted run would: the decisions are a function of the trials' results
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from ablations.experiment.core import events
from ablations.experiment.core.design_options import rounds_of
from ablations.experiment.designs.base import (
    Design,
    planned_decision,
    refuse_crossed,
    refuse_unreachable_tolerance,
)
from ablations.experiment.designs.resume_text import counts_line
from ablations.experiment.designs.parts import Parts, stopped
from ablations.experiment.execution.tune_setup import TableTune, Part
from ablations.experiment.core.options import (
    TUNE_SUBDIR,
    ExperimentResult,
    RunOptions,
    experiment_dir,
)
from ablations.experiment.core.plans import plan_from_metadata, trial_plan
from ablations.config.comparison import DEFAULT_MARGIN
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.experiment.provenance.experiment_record import declared_metrics_of
from ablations.results.io.directions import metric_of
from ablations.results.stats.sequential import (
    DEFAULT_MAX_SEEDS,
    SeedDesign,
    design_note,
    seed_span,
)
from ablations.results.stats.planned import verdict_test
from ablations.results.stats.sequential_table import active_arms, sequential_verdict_table
from ablations.results.stats.shared_variance import DEFAULT_TEST, TEST_VERSIONS
from ablations.search_spaces import TrialSpec

if TYPE_CHECKING:
    from ablations.experiment.planning.table_plan import PlanState
    from ablations.search_spaces import Space


def _looks(request: Request) -> tuple[int, int]:
    """(the pilot's seeds, the most seeds a variant may reach) of ``request``.

    Raises:
        UsageError: ``max_seeds`` below the pilot's.
    """
    rounds = rounds_of(request.design)
    pilot = rounds.pilot or 3
    max_seeds = rounds.max_seeds or max(DEFAULT_MAX_SEEDS, pilot)
    if max_seeds < pilot:
        raise UsageError(f"{arg('max_seeds')} {max_seeds} is below the pilot's {pilot} seeds; "
                         f"raise {arg('max_seeds')} or lower {arg('pilot')}")
    return pilot, max_seeds


@dataclass
class RoundsRun:
    """What experiment.json's ``rounds`` records: the design and the rounds so far."""

    design: SeedDesign
    seeds: list[int]  # the seed order: look k runs seeds[:looks[k]]
    reference: str
    metric: str
    margin: str
    alpha: float
    plan: dict[str, TrialSpec]  # every cell up to max_seeds, by trial name
    rounds: list[dict[str, Any]] = field(default_factory=list)  # round, tune, trials, active
    # A fixed-seed experiment continued with --seeds auto (ablations/experiment/continuing.py):
    # its seeds, trials, CPU/GPU-hours and command before the continuation; None for one
    # started auto.
    continued: Optional[dict[str, Any]] = None
    # equivalent only with the failure-rate bound below it (None: no tolerance)
    max_failure_rate: Optional[float] = None
    # the verdicts' test (results/stats/shared_variance.py), kept from the first round on
    test: str = DEFAULT_TEST

    def record(self) -> dict[str, Any]:
        record = {"design": self.design.to_dict(), "seeds": self.seeds,
                  "reference": self.reference, "metric": self.metric, "margin": self.margin,
                  "alpha": self.alpha, "plan": trial_plan(self.plan.values()),
                  "rounds": self.rounds}
        if self.continued is not None:
            record["continued"] = self.continued
        if self.max_failure_rate is not None:
            record["max_failure_rate"] = self.max_failure_rate
        record["test"] = {"name": self.test, "version": TEST_VERSIONS[self.test]}
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RoundsRun:
        trials, _ = plan_from_metadata({"trials": record["plan"]})
        return cls(SeedDesign.from_dict(record["design"]), list(record["seeds"]),
                   record["reference"], record["metric"], record["margin"],
                   float(record["alpha"]), {spec.name: spec for spec in trials},
                   list(record["rounds"]), record.get("continued"),
                   record.get("max_failure_rate"), verdict_test(record))

    def cells(self, arms: Sequence[str], seeds: Sequence[int]) -> list[TrialSpec]:
        """The plan's trials of ``arms`` at ``seeds``, in the plan's order."""
        arms, seeds = set(arms), set(seeds)
        return [s for s in self.plan.values() if s.variant in arms and s.seed in seeds]

    def current_trials(self) -> list[TrialSpec]:
        """The trials of the last round recorded (the pilot's before any)."""
        if not self.rounds:
            return self.cells(self.arms_and_reference(), self.look_seeds(1))
        return [self.plan[name] for name in self.rounds[-1]["trials"]]

    def arms_and_reference(self) -> list[str]:
        return list(dict.fromkeys(s.variant for s in self.plan.values()))

    def look_seeds(self, number: int) -> list[int]:
        """The seeds round ``number`` (1-based) adds."""
        looks = (0, *self.design.looks)
        return self.seeds[looks[number - 1]:looks[number]]

    def verdicts(self, trials: pd.DataFrame) -> pd.DataFrame:
        """The design's verdicts on ``trials``, on the metric with the direction the plan's
        own code declares (else the built-in model's)."""
        declared = declared_metrics_of([spec.config for spec in self.plan.values()])
        return sequential_verdict_table(trials, self.design, self.seeds,
                                        reference=self.reference,
                                        metric=metric_of(self.metric, declared),
                                        margin=self.margin, alpha=self.alpha,
                                        max_failure_rate=self.max_failure_rate,
                                        test=self.test)


def next_arms(table: pd.DataFrame, ran: Sequence[str]) -> list[str]:
    """Variants that get the next look's seeds: those of the round just run (``ran``) with no
    verdict yet and at least two outcomes, ok or diverged (a diverged seed is evidence, so an
    arm whose training diverges goes on; a variant whose trials fail for the machinery gets no
    more seeds to fail on; a variant that stopped never resumes; one whose seeds measured no
    variance, results/stats/seed_ties.py, gets none: more seeds would give the same value)."""
    rows = table.set_index("ablation")
    outcomes = rows["n_ok"] + (rows["n_diverged"] if "n_diverged" in rows else 0)
    flat = (rows["no_seed_variance"].fillna(False).astype(bool) if "no_seed_variance" in rows
            else pd.Series(False, index=rows.index))
    return [arm for arm in active_arms(table)
            if arm in set(ran) and outcomes[arm] >= 2 and not flat[arm]]


def run_rounds(run: RoundsRun, options: RunOptions,
               skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
               root: str, finished: Optional[ExperimentResult] = None
               ) -> tuple[ExperimentResult, Optional[pd.DataFrame]]:
    """Run the rounds (or continue them after a stop) until every variant has a verdict or
    ran the design's last look. Returns the experiment's result (all rounds' rows) and the
    verdict table the last round ended with (None when the run was stopped in a round, or
    no verdict is possible, e.g. every reference trial failed).

    ``finished``: the rows of the last recorded round, complete (a fixed-seed experiment
    continued with --seeds auto: its trials are round 1); they are decided on as they are,
    not run through Tune again, and ``run``'s record is written to experiment.json first."""
    # experiment.json's rounds record is the plan fixed before the data: no planned record
    parts = Parts(Rounds(run, root), options, root)
    arms = list(dict.fromkeys(s.variant for s in run.plan.values() if s.variant != run.reference))
    if finished is not None:
        number = len(run.rounds)
        current = [run.plan[name] for name in run.rounds[-1]["trials"]]
        # made sequential before any round runs: a stop from here on is continued by plain
        # --resume, and a run whose first look decides every variant still reads as the
        # sequential experiment it became
        parts.write_record({"rounds": run.record()}, stamp="resumed_at", append=True)
    elif resume and run.rounds:
        number = len(run.rounds)
        current = [run.plan[name] for name in run.rounds[-1]["trials"]]
    else:
        number, resume = 1, False
        current = run.cells([run.reference, *arms], run.look_seeds(1))
        run.rounds = [{"round": 1, "tune": TUNE_SUBDIR, "trials": [s.name for s in current]}]
    while True:
        earlier = [name for r in run.rounds[:-1] for name in r["trials"]]
        looks = run.design.looks
        kept = " (the fixed run's trials, kept, not run again)" if finished is not None else ""
        events.info(f"Round {number} of at most {len(looks)}{kept}: {len(current)} trials "
            f"({len({s.variant for s in current})} variants, seeds "
            f"{seed_span(run.look_seeds(number))}; {looks[number - 1]} seeds per variant so far)")
        if finished is not None:
            result, finished = finished, None
            result.wall_s = 0.0
            result = parts.add(result)
        else:
            part = Part(run.rounds[-1]["tune"], number, earlier_rows=parts.earlier_rows(earlier))
            result = parts.run(current, TableTune(part), skipped, resume=resume)
        if stopped(result.trials):
            return result, None  # stopped: --resume continues this round
        try:
            table = run.verdicts(result.trials)
        except ValueError as exc:  # e.g. every reference trial failed: nothing to decide on
            events.info(f"No verdicts after round {number} ({exc}): no more rounds")
            return result, None
        ran = {s.variant for s in current}
        following = next_arms(table, ran)
        decided = table[table["ablation"].isin(ran - {run.reference, *following})]
        events.info(f"Round {number}: " + (", ".join(
            f"{a} {v}" for a, v in zip(decided["ablation"], decided["verdict"]))
            or "no verdict yet"))
        if not following or number == len(looks):
            if following:
                events.info(f"{len(following)} variant(s) ran {looks[-1]} seeds "
                            f"({arg('max_seeds')}) without a verdict: {', '.join(following)}")
            return result, table
        number += 1
        current = run.cells([run.reference, *following], run.look_seeds(number))
        run.rounds.append({"round": number, "tune": f"{TUNE_SUBDIR}-round{number}",
                           "trials": [s.name for s in current]})
        resume = False
        events.info(f"{len(following)} variant(s) get seeds {seed_span(run.look_seeds(number))}: "
            f"{', '.join(following)}")


class Rounds(Design):
    """``--seeds auto``: the rounds of :func:`run_rounds`, each a grid in its own Tune folder
    (``tune`` for the pilot, ``tune-round<k>`` after), its number in the ``round`` column, the
    earlier rounds' rows kept before its own; the verdicts are the sequential design's (its
    metric, margin and alpha). ``finished``: a fixed run continued into rounds (its rows are
    round 1)."""

    record_key = "rounds"
    asked_by = f"{arg('seeds')} auto"
    tensorboard_dir = ""  # the experiment's folder: every round's Tune folder

    def __init__(self, run: RoundsRun, root: str = "",
                 finished: Optional[ExperimentResult] = None) -> None:
        self.run, self.root, self.finished = run, root, finished

    @classmethod
    def continuing(cls, run: RoundsRun, root: str, meta: dict[str, Any]) -> Rounds:
        """The rounds that continue the fixed experiment in ``root`` (``meta``: its
        experiment.json; ``run``: ablations/experiment/continuing.py's plan): its finished
        tables are round 1 as they are; its settings are those recorded before its first
        trial."""
        from ablations.results.io.files import read_experiment

        frames = read_experiment(root)
        design = cls(run, root, ExperimentResult(root, frames["trials"], frames["epochs"],
                                                 frames["predictions"]))
        design.planned = meta.get("planned")
        return design

    @classmethod
    def check_request(cls, request: Request, space: Space) -> None:
        if request.auto_batch:
            raise UsageError(f"{arg('auto_batch')} with {arg('seeds')} auto is not supported "
                             f"yet: pass the batch size ({arg('overrides')} batch_size=N) or "
                             "fixed seeds")

    @classmethod
    def seed_list(cls, request: Request) -> list[int]:
        """Every seed the rounds may run: ``range(max_seeds)``; its seeds come in rounds,
        each variant's own, not crossed."""
        refuse_crossed(request)
        return list(range(_looks(request)[1]))

    @classmethod
    def prepare(cls, state: PlanState) -> Rounds:
        """The table at every seed it may reach (the run's plan), the pilot's trials first."""
        state.plan_table()
        space, request, seeds = state.space, state.request, state.seeds
        seed_design = SeedDesign.plan(*_looks(request))
        run = RoundsRun(seed_design, list(seeds), space.reference, request.metric,
                            request.margin or DEFAULT_MARGIN, request.alpha,
                            {s.name: s for s in state.trials},
                            max_failure_rate=request.max_failure_rate)
        pilot = set(seeds[:seed_design.looks[0]])
        state.trials = [s for s in state.trials if s.seed in pilot]  # the dry run shows them
        state.skipped = [(s, why) for s, why in state.skipped if s.seed in pilot]
        variants = {s.variant for s in state.trials}
        if space.reference not in variants:
            raise UsageError(f"{arg('seeds')} auto: the reference {space.reference!r} cannot run "
                             "here (skipped); every round compares with it")
        if len(variants) < 2:
            raise UsageError(f"{arg('seeds')} auto: only the reference would run; there is "
                             f"nothing to decide (see {arg('only')})")
        return cls(run)

    def planned_settings(self, request: Request, space: Space,
                         seeds: Sequence[int]) -> dict[str, Any]:
        """The decision alone: the design is the rounds record's."""
        refuse_unreachable_tolerance(request, self.run.design.max_seeds, rounds=True)
        return {"decision": planned_decision(request, space)}

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
                ) -> ExperimentResult:
        result, _ = run_rounds(self.run, options, skipped, resume=resume,
                               root=self.root or experiment_dir(options),
                               finished=self.finished)
        return result

    def record(self, metadata: dict[str, Any]) -> None:
        ran = [self.run.plan[name] for r in self.run.rounds for name in r["trials"]]
        metadata["trials"] = trial_plan(ran)  # every round's so far
        metadata["seeds"] = sorted({spec.seed for spec in ran})
        metadata[self.record_key] = self.run.record()

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Rounds:
        design = cls(RoundsRun.from_record(meta[cls.record_key]), root)
        design.planned = meta.get("planned")
        return design

    def same_plan_as(self, recorded: Design, trials: Sequence[TrialSpec],
                     recorded_trials: Sequence[TrialSpec], where: str) -> bool:
        """The whole table up to the last look's seeds, the design, and the metric, margin
        and alpha its rounds decide on."""
        was, now = recorded.run, self.run
        if (was.metric, str(was.margin), was.alpha) != (now.metric, str(now.margin), now.alpha):
            raise UsageError(f"{where} decides its rounds on metric {was.metric}, margin "
                             f"{was.margin}, alpha {was.alpha:g}; give those (or "
                             f"{arg('resume')}, which keeps them) or choose another "
                             f"{arg('name')}")
        return (trial_plan(now.plan.values()) == trial_plan(was.plan.values())
                and now.design.to_dict() == was.design.to_dict())

    def count_text(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        looks = self.run.design.looks
        return (f"{len({s.variant for s in self.run.plan.values()})} variants, seeds in "
                f"rounds ({looks[0]} seeds, then up to {looks[-1]} where no verdict yet)")

    def dry_run_lines(self, alpha: float) -> list[str]:
        return [f"{design_note(self.run.design, alpha)} The pilot's trials:"]

    @classmethod
    def rounds_refusal(cls, name: str, meta: dict[str, Any], resume: str) -> Optional[str]:
        return (f"{name} already runs with {arg('seeds')} auto; continue it with plain "
                f"{arg('resume')} (no {arg('seeds')}): {resume}")

    def resume_line(self, name: str, space: str, target: str, trials: Sequence[TrialSpec],
                    retry_failed: bool) -> str:
        run = self.run  # the round a stop cut short, in its own Tune folder
        tune_subdir = run.rounds[-1]["tune"] if run.rounds else None
        counts = counts_line(target, run.current_trials(), None, retry_failed, tune_subdir)
        return f"Resuming experiment {name} ({space}): {counts}"

    def continued_line(self, name: str, space: str, seeds: Sequence[int]) -> str:
        """What continuing the fixed run ``name`` into these rounds will do, in one line."""
        run = self.run
        looks = ", ".join(str(n) for n in run.design.looks)
        return (f"Continuing experiment {name} ({space}) with {arg('seeds')} auto: its "
                f"{len(run.current_trials())} trials at seeds {', '.join(map(str, seeds))} are "
                f"the pilot (round 1, kept, not run again); looks at {looks} seeds per variant")
