"""``--tune-each KEYS --tune-budget N``: every arm tuned on the same budget, then compared at
its own best configuration as well as at the baseline's hyperparameters.

An ablation table runs every arm at the baseline's hyperparameters, so an arm can look worse
only because it is mistuned. Here every arm gets the same search (Melis et al. 2018, Lucic et
al. 2018: an equal tuning budget per arm), in stages, each its own Tune run in the
experiment's folder and recorded in experiment.json (``tuned``) as it ends, so ``--resume``
continues the stage a stop cut short and then goes on:

1. ``evaluation`` (Tune folder ``tune``): the ablation table a plain run gives, every arm at
   the configuration given, at the evaluation seeds.
2. ``tuning`` (``tune-tuning-<arm>``, one per arm, in the table's order): an Optuna TPE search
   (Optuna study ``<experiment>-<arm>`` in optuna.db) over the same keys and ranges with the
   same number of trials for every arm, on the validation metric only, FIFO (every sample is
   trained for the same epochs: no arm's samples are stopped by another's), at one tuning
   seed that no evaluation seed equals (the test set never chooses a configuration, and the
   evaluation seeds do not see the noise the search fitted).
3. ``tuned`` (``tune-tuned``): every arm at its own best configuration (its tuning trial with
   the lowest validation metric) at the evaluation seeds, as trials ``<arm>-tuned-seed<k>``.

trials.parquet's ``phase`` says which is which. The verdicts of each evaluation are computed
apart (results/stats/tuned.py), and the summary and the report put them side by side.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from ablations.config.statuses import TrialStatus
from ablations.config import TrialConfig, apply_overrides
from ablations.experiment.core import events
from ablations.experiment.designs.base import Design
from ablations.experiment.designs.resume_text import counts_line
from ablations.experiment.designs.search import SearchRun, SearchTune, publish_optuna
from ablations.experiment.designs.parts import Parts, stopped
from ablations.experiment.execution.tune_setup import TableTune, Part
from ablations.experiment.core.options import (
    TUNE_SUBDIR,
    ExperimentResult,
    RunOptions,
    experiment_dir,
)
from ablations.experiment.core.plans import plan_from_metadata, trial_plan
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.experiment.execution.tables import plain_value, result_name
from ablations.search_spaces import TrialSpec
from ablations.search_spaces.hpo import HPO_METRIC, HPO_MODE, HPO_SEARCH

if TYPE_CHECKING:
    from ablations.config.comparison import Decision
    from ablations.experiment.planning.table_plan import PlanState
    from ablations.search_spaces import Space

FIRST_TUNING_SEED = 1000  # the tuning seed: the first from here that no evaluation seed is


def tuning_space(keys: Sequence[str]) -> dict[str, tuple[str, Any]]:
    """The search over ``keys``: each key's range in the hpo space (search_spaces/hpo.py).
    Raises ValueError naming the keys that have none."""
    unknown = [key for key in keys if key not in HPO_SEARCH]
    if unknown or not keys:
        raise ValueError(f"{','.join(unknown) or 'nothing'}: give keys that have a search "
                         f"range: {', '.join(HPO_SEARCH)}")
    return {key: HPO_SEARCH[key] for key in keys}


def tuning_seed(seeds: Sequence[int]) -> int:
    """The seed every tuning trial runs at: the first from 1000 no evaluation seed equals."""
    seed = FIRST_TUNING_SEED
    while seed in set(seeds):
        seed += 1
    return seed


def startup_trials(budget: int) -> int:
    """TPE's random trials before it models: half the budget, at least 2, at most Optuna's
    default 10 (with the default, a budget of 10 or less would be random search)."""
    return max(2, min(10, budget // 2))


@dataclass
class TunedRun:
    """What experiment.json's ``tuned`` records: the search, the plan and the stages so far."""

    keys: list[str]
    budget: int
    seed: int  # the tuning seed
    reference: str
    plan: dict[str, TrialSpec]  # the evaluation trials at the configuration given, by name
    metric: str = HPO_METRIC  # what the search minimises: a validation metric only
    # arm -> its best values and its best tuning trial (None: no tuning trial ended ok)
    best: dict[str, Optional[dict[str, Any]]] = field(default_factory=dict)
    best_trials: dict[str, Optional[str]] = field(default_factory=dict)
    stages: dict[str, list[str]] = field(default_factory=dict)  # done stage -> its trials

    @property
    def space(self) -> dict[str, tuple[str, Any]]:
        return tuning_space(self.keys)

    def arms(self) -> list[str]:
        """The arms in the table's order (the reference's first if the plan has it first)."""
        return list(dict.fromkeys(spec.variant for spec in self.plan.values()))

    def arm_base(self, arm: str) -> TrialConfig:
        """Where ``arm``'s search starts: its configuration at the tuning seed."""
        spec = next(s for s in self.plan.values() if s.variant == arm)
        return spec.config.replace(seed=self.seed)

    def tuned_trials(self) -> list[TrialSpec]:
        """The evaluation trials at each arm's own best configuration."""
        out = []
        for spec in self.plan.values():
            if self.best.get(spec.variant) is None:
                continue
            config = apply_overrides(spec.config, self.best[spec.variant],
                                     source=f"the best of {spec.variant}'s tuning")
            out.append(TrialSpec(f"{spec.variant}-tuned-seed{spec.seed}", spec.variant,
                                 spec.seed, config))
        return out

    def record(self) -> dict[str, Any]:
        return {"keys": self.keys, "space": {k: [kind, list(args)] for k, (kind, args)
                                             in self.space.items()},
                "budget": self.budget, "seed": self.seed, "reference": self.reference,
                "metric": self.metric, "mode": HPO_MODE, "scheduler": "fifo",
                "startup_trials": startup_trials(self.budget),
                "plan": trial_plan(self.plan.values()), "best": self.best,
                "best_trials": self.best_trials, "stages": self.stages}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TunedRun:
        trials, _ = plan_from_metadata({"trials": record["plan"]})
        plan = {spec.name: spec for spec in trials}
        return cls(list(record["keys"]), int(record["budget"]), int(record["seed"]),
                   record["reference"], plan, record.get("metric", HPO_METRIC),
                   dict(record.get("best", {})), dict(record.get("best_trials", {})),
                   {k: list(v) for k, v in record.get("stages", {}).items()})

    def steps(self) -> list[tuple[str, Optional[str]]]:
        """The stages in order: (stage, the arm a tuning stage searches, else None)."""
        return [("evaluation", None), *((stage_names(arm), arm) for arm in self.arms()),
                (stage_names(), None)]

    def pending(self) -> Optional[tuple[int, str, Optional[str]]]:
        """The first stage not recorded as ended: (its number, stage, arm); None if none."""
        for number, (stage, arm) in enumerate(self.steps(), 1):
            if stage not in self.stages:
                return number, stage, arm
        return None

    def tune_subdir(self, stage: str) -> str:
        return TUNE_SUBDIR if stage == "evaluation" else f"{TUNE_SUBDIR}-{stage}"

    def pick_best(self, arm: str, rows: pd.DataFrame) -> None:
        """``arm``'s best configuration: its ok tuning trial with the lowest metric."""
        ok = rows[(rows["status"] == TrialStatus.OK) & rows[self.metric].notna()]
        if ok.empty:  # no best: the arm has no trials at its own best
            self.best[arm], self.best_trials[arm] = None, None
            return
        best = ok.sort_values(self.metric, kind="stable").iloc[0]
        self.best[arm] = {key: plain_value(best[key]) for key in self.keys}
        self.best_trials[arm] = str(best["trial_name"])


def stage_names(arm: Optional[str] = None) -> str:
    return f"tuning-{arm}" if arm else "tuned"


def arm_sample(result: Any, *, base: TrialConfig, arm: str) -> TrialSpec:
    """A tuning trial of ``arm`` as a TrialSpec: named by Tune, its ablation the arm's."""
    params = dict((result.config or {}).get("params", {}))  # None: never started
    config = apply_overrides(base, params, source="a tuning sample")
    return TrialSpec(result_name(result), arm, config.seed, config)


def arm_search(run: TunedRun, arm: str, *, fresh: bool, earlier_rows: Optional[tuple],
               study: str) -> SearchTune:
    """Stage 2 for one arm: the search, FIFO, its trials named ``tuning-<arm>-<trial id>``,
    their ablation the arm's, in Optuna's study ``study``."""
    search = SearchRun(base=run.arm_base(arm), space=run.space, num_samples=run.budget,
                       metric=run.metric, mode=HPO_MODE, scheduler="fifo")
    stage = stage_names(arm)
    return SearchTune(search, part=Part(run.tune_subdir(stage), phase="tuning",
                                        earlier_rows=earlier_rows),
                      plan_key=stage, study=study, fresh=fresh,
                      startup_trials=startup_trials(run.budget),
                      sampled=functools.partial(arm_sample, base=search.base, arm=arm))


def run_stages(run: TunedRun, options: RunOptions, skipped: Sequence[tuple[TrialSpec, str]],
               *, resume: bool, root: str) -> ExperimentResult:
    """Run the stages not yet recorded as ended (a resume continues the one a stop cut
    short). Returns the experiment's result with every stage's rows; a stop returns at once,
    its unfinished trials in the table."""
    design = Tuned(run, root)  # its record: the tuned one, no planned record beside it
    parts = Parts(design, options, root)
    result: Optional[ExperimentResult] = None
    steps = run.steps()
    for number, (stage, arm) in enumerate(steps, 1):
        if stage in run.stages:
            continue
        earlier = parts.earlier_rows([name for names in run.stages.values() for name in names])
        started = bool(run.stages) or resume  # a later stage, or the first one resumed
        if stage == "evaluation":
            setup = TableTune(Part(TUNE_SUBDIR, phase="evaluation", earlier_rows=earlier))
            trials = list(run.plan.values())
            events.info(f"Stage {number} of {len(steps)}: the table at the configuration given, "
                f"{len(trials)} trials")
        elif arm is not None:
            setup = arm_search(run, arm, fresh=not any(s.startswith("tuning-")
                                                       for s in run.stages) and not resume,
                               earlier_rows=earlier, study=f"{options.name}-{arm}")
            trials = []
            events.info(f"Stage {number} of {len(steps)}: tuning {arm}, {run.budget} trials over "
                f"{', '.join(run.keys)} at seed {run.seed}")
        else:
            setup = TableTune(Part(run.tune_subdir(stage), phase="tuned", earlier_rows=earlier))
            trials = run.tuned_trials()
            events.info(f"Stage {number} of {len(steps)}: each arm at its own best, {len(trials)} "
                "trials")
        result = parts.run(trials, setup, skipped if stage == "evaluation" else (),
                           resume=started and resume)
        if arm is not None:
            publish_optuna(root, options.name)  # no best_config.yaml: the best is per arm
        frame = result.trials
        mine = frame[frame["phase"] == setup.part.phase]
        if arm is not None:
            mine = mine[mine["ablation"] == arm]
        if stopped(mine):
            return result  # stopped: --resume continues this stage
        if arm is not None:
            run.pick_best(arm, mine)
            if run.best[arm] is None:
                events.info(f"  {arm}: no tuning trial ended ok; it is not evaluated at its "
                            "own best")
            else:
                best = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in run.best[arm].items())
                events.info(f"  {arm}: best {run.metric} {mine[run.metric].min():.4f} at {best}")
        run.stages[stage] = [str(name) for name in mine["trial_name"]]
        fields: dict[str, Any] = {}
        design.record(fields)
        parts.write_record(fields, stamp="ended_stage_at")
        resume = False
    return result if result is not None else parts.tables()  # every stage had ended


class Tuned(Design):
    """Tuned ablations: the stages of :func:`run_stages` (the evaluation, one search per arm,
    each arm at its own best), each its own Tune run; the summary sets the verdicts at each
    arm's own best beside those at the configuration given (:meth:`summary_lines`)."""

    record_key = "tuned"
    asked_by = arg("tune_each")
    tensorboard_dir = ""  # the experiment's folder: every stage's Tune folder

    def __init__(self, run: TunedRun, root: str = "") -> None:
        self.run, self.root = run, root

    @classmethod
    def check_request(cls, request: Request, space: Space) -> None:
        """Refuse, before anything runs, a request this run kind cannot serve: a search space,
        ``seeds="auto"``, crossed seeds, a null control or ``auto_batch`` (one line)."""
        refused = {"a search space": space.is_search,
                   f"{arg('seeds')} auto": request.seeds == "auto",
                   arg("cross_seeds"): request.cross_seeds,
                   arg("null_control"): request.null_control,
                   arg("auto_batch"): request.auto_batch}
        for what, given in refused.items():
            if given:
                raise UsageError(f"{arg('tune_each')} tunes the arms of an ablation table at "
                                 f"fixed seeds; it does not combine with {what} (yet)")

    @classmethod
    def prepare(cls, state: PlanState) -> Tuned:
        """The table's evaluation trials, and one search per arm to run before them.

        Raises:
            UsageError: fewer than two variants would run, or the reference cannot.
        """
        state.plan_table()
        space, request = state.space, state.request
        variants = {s.variant for s in state.trials}
        if len(variants) < 2:
            raise UsageError(f"{arg('tune_each')}: fewer than two variants would run; there is "
                             f"nothing to compare (see {arg('only')})")
        if space.reference not in variants:
            raise UsageError(f"{arg('tune_each')}: the reference {space.reference!r} cannot run "
                             "here; every arm is compared with it")
        return cls(TunedRun(list(request.design.each), request.design.budget,
                            tuning_seed(state.seeds), space.reference,
                            {s.name: s for s in state.trials}))

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
                ) -> ExperimentResult:
        return run_stages(self.run, options, skipped, resume=resume,
                          root=self.root or experiment_dir(options))

    def record(self, metadata: dict[str, Any]) -> None:
        run = self.run
        metadata[self.record_key] = run.record()
        evaluated = [*run.plan.values(), *(run.tuned_trials() if run.best.keys() >= set(
            run.arms()) else [])]
        metadata["trials"] = trial_plan(evaluated)
        metadata["seeds"] = sorted({spec.seed for spec in run.plan.values()})

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Tuned:
        design = cls(TunedRun.from_record(meta[cls.record_key]), root)
        design.planned = meta.get("planned")
        return design

    def same_plan_as(self, recorded: Design, trials: Sequence[TrialSpec],
                     recorded_trials: Sequence[TrialSpec], where: str) -> bool:
        """The table at the configuration given, and the same search."""
        was, now = recorded.run, self.run
        if (was.keys, was.budget) != (now.keys, now.budget):
            raise UsageError(f"{where} tunes {','.join(was.keys)} with {arg('tune_budget')} "
                             f"{was.budget}; give those (or {arg('resume')}, which keeps them) "
                             f"or choose another {arg('name')}")
        return trial_plan(now.plan.values()) == trial_plan(was.plan.values())

    def count_text(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        run = self.run
        arms, evaluation = len(run.arms()), len(run.plan)
        return (f"{arms} variants x {len(seeds)} seeds, each tuned with {run.budget} "
                f"trials: {evaluation} + {arms * run.budget} + {evaluation} trials")

    def dry_run_lines(self, alpha: float) -> list[str]:
        run = self.run
        ranges = "; ".join(f"{key} {kind} {list(args)}" for key, (kind, args)
                           in run.space.items())
        return [f"Tuned ablations: every arm searched with Optuna TPE, {run.budget} trials "
                f"each ({startup_trials(run.budget)} random first), FIFO, on {run.metric}, "
                f"at seed {run.seed} (no evaluation seed); over {ranges}. Then every arm at "
                "its own best at the evaluation seeds. The evaluation at the configuration "
                "given:"]

    def summary_lines(self, trials: Any, meta: dict[str, Any],
                      decision: Decision) -> list[str]:
        from ablations.results.stats.analyses import analysis_of
        from ablations.results.stats.tuned import side_by_side_text

        try:
            table = analysis_of(meta).table("tuned", trials, decision)
        except (ValueError, KeyError) as exc:
            return [f"\nNo tuned comparison: {exc}"]
        return ["", *side_by_side_text(table).splitlines()]

    def resume_line(self, name: str, space: str, target: str, trials: Sequence[TrialSpec],
                    retry_failed: bool) -> str:
        tuned = self.run
        pending = tuned.pending()
        if pending is None:
            outlook = "every stage has ended; nothing to run"
        else:
            number, stage, arm = pending
            trials = (list(tuned.plan.values()) if stage == "evaluation" else
                      tuned.tuned_trials() if arm is None else [])
            counts = counts_line(target, trials, tuned.budget if arm is not None else None,
                                 retry_failed, tuned.tune_subdir(stage))
            outlook = f"stage {number} of {len(tuned.steps())} ({stage}): {counts}"
        return f"Resuming experiment {name} ({space}, tuned ablations): {outlook}"
