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
apart (results/stats/phases.py), and the summary and the report put them side by side.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd

from ablations.config import TrialConfig
from ablations.experiment.options import TUNE_SUBDIR, ExperimentResult, RunOptions
from ablations.experiment.request import UsageError
from ablations.experiment.runner import plan_from_metadata, run_experiment, trial_plan
from ablations.experiment.strategies.base import Strategy
from ablations.experiment.strategies.grid import Grid
from ablations.experiment.strategies.hpo import Hpo, HpoSearch, publish_optuna, tune_setup
from results.io.files import METADATA_FILE, TRIALS_FILE, is_file, join, read_experiment, read_metadata
from results.io.files import write_json_atomic
from search_spaces import TrialSpec
from search_spaces.hpo import HPO_METRIC, HPO_MODE, HPO_SEARCH

UNFINISHED = ("interrupted", "not_started")
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
        from ablations.config import apply_overrides

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
        from ablations.experiment.tables import plain_value

        ok = rows[(rows["status"] == "ok") & rows[self.metric].notna()]
        if ok.empty:  # no best: the arm has no trials at its own best
            self.best[arm], self.best_trials[arm] = None, None
            return
        best = ok.sort_values(self.metric, kind="stable").iloc[0]
        self.best[arm] = {key: plain_value(best[key]) for key in self.keys}
        self.best_trials[arm] = str(best["trial_name"])


def stage_names(arm: Optional[str] = None) -> str:
    return f"tuning-{arm}" if arm else "tuned"


class EvaluationStage(Grid):
    """Stage 1 or 3: a grid of evaluation trials in its own Tune folder, the earlier stages'
    rows kept before its own."""

    kind = "tuned-evaluation"

    def __init__(self, run: TunedRun, phase: str, tune_subdir: str,
                 earlier_rows: Optional[tuple]) -> None:
        self.run, self.phase, self.tune_subdir = run, phase, tune_subdir
        self.earlier_rows = earlier_rows

    def record(self, metadata: dict[str, Any], trials: Sequence[TrialSpec]) -> None:
        _record(metadata, self.run)


class ArmSearch(Hpo):
    """Stage 2 for one arm: the search, its trials named ``tuning-<arm>-<trial id>``, their
    ablation the arm's."""

    kind = "tuned-search"
    phase = "tuning"

    def __init__(self, run: TunedRun, arm: str, fresh: bool,
                 earlier_rows: Optional[tuple]) -> None:
        super().__init__(HpoSearch(base=run.arm_base(arm), space=run.space,
                                   num_samples=run.budget, metric=run.metric, mode=HPO_MODE,
                                   scheduler="fifo"))
        self.run, self.arm, self.fresh = run, arm, fresh
        self.tune_subdir = run.tune_subdir(stage_names(arm))
        self.plan_key = stage_names(arm)
        self.earlier_rows = earlier_rows

    def record(self, metadata: dict[str, Any], trials: Sequence[TrialSpec]) -> None:
        _record(metadata, self.run)

    def trainable_plan(self, trials: Sequence[TrialSpec]) -> dict[str, dict[str, Any]]:
        return {self.plan_key: self.search.base.to_dict()}

    def tune_setup(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                   planned: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return tune_setup(self.search, options, root, plan_key=self.plan_key,
                          study=f"{options.name}-{self.arm}", fresh=self.fresh,
                          startup_trials=startup_trials(self.run.budget))

    def specs(self, grid: Any, trials: Sequence[TrialSpec]) -> list[TrialSpec]:
        from ablations.config import apply_overrides
        from ablations.experiment.tables import result_name

        out = []
        for result in grid:
            params = dict((result.config or {}).get("params", {}))  # None: never started
            config = apply_overrides(self.search.base, params, source="a tuning sample")
            out.append(TrialSpec(result_name(result), self.arm, config.seed, config))
        return out

    def finish(self, result: Any, root: str, options: RunOptions) -> None:
        publish_optuna(root, options.name)  # no best_config.yaml: the best is per arm


def _record(metadata: dict[str, Any], run: TunedRun) -> None:
    metadata["tuned"] = run.record()
    evaluated = [*run.plan.values(), *(run.tuned_trials() if run.best.keys() >= set(
        run.arms()) else [])]
    metadata["trials"] = trial_plan(evaluated)
    metadata["seeds"] = sorted({spec.seed for spec in run.plan.values()})


def _earlier_rows(root: str, run: TunedRun) -> Optional[tuple]:
    """The rows of the stages that ended, from the experiment's files."""
    names = {name for trials in run.stages.values() for name in trials}
    if not names or not is_file(join(root, TRIALS_FILE)):
        return None
    frames = read_experiment(root)
    return tuple(frames[key][frames[key]["trial_name"].isin(names)]
                 for key in ("trials", "epochs", "predictions"))


def _write_record(root: str, run: TunedRun) -> None:
    meta = read_metadata(root) or {}
    _record(meta, run)
    meta["ended_stage_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    write_json_atomic(meta, join(root, METADATA_FILE))


def run_stages(run: TunedRun, options: RunOptions, skipped: Sequence[tuple[TrialSpec, str]],
               *, resume: bool, root: str, say: Callable[[str], None]) -> ExperimentResult:
    """Run the stages not yet recorded as ended (a resume continues the one a stop cut
    short). Returns the experiment's result with every stage's rows; a stop returns at once,
    its unfinished trials in the table."""
    result: Optional[ExperimentResult] = None
    wall_s = 0.0
    steps = run.steps()
    for number, (stage, arm) in enumerate(steps, 1):
        if stage in run.stages:
            continue
        earlier = _earlier_rows(root, run)
        started = bool(run.stages) or resume  # a later stage, or the first one resumed
        if stage == "evaluation":
            strategy: Strategy = EvaluationStage(run, "evaluation", TUNE_SUBDIR, earlier)
            trials = list(run.plan.values())
            say(f"Stage {number} of {len(steps)}: the table at the configuration given, "
                f"{len(trials)} trials")
        elif arm is not None:
            strategy = ArmSearch(run, arm, fresh=not any(s.startswith("tuning-")
                                                         for s in run.stages) and not resume,
                                 earlier_rows=earlier)
            trials = []
            say(f"Stage {number} of {len(steps)}: tuning {arm}, {run.budget} trials over "
                f"{', '.join(run.keys)} at seed {run.seed}")
        else:
            strategy = EvaluationStage(run, "tuned", run.tune_subdir(stage), earlier)
            trials = run.tuned_trials()
            say(f"Stage {number} of {len(steps)}: each arm at its own best, {len(trials)} "
                "trials")
        result = run_experiment(trials, options, skipped if stage == "evaluation" else (),
                                strategy=strategy, resume=started and resume)
        wall_s += result.wall_s
        result.wall_s = wall_s
        frame = result.trials
        mine = frame[frame["phase"] == strategy.phase]
        if arm is not None:
            mine = mine[mine["ablation"] == arm]
        if mine["status"].isin(UNFINISHED).any():
            return result  # stopped: --resume continues this stage
        if arm is not None:
            run.pick_best(arm, mine)
            if run.best[arm] is None:
                say(f"  {arm}: no tuning trial ended ok; it is not evaluated at its own best")
            else:
                best = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in run.best[arm].items())
                say(f"  {arm}: best {run.metric} {mine[run.metric].min():.4f} at {best}")
        run.stages[stage] = [str(name) for name in mine["trial_name"]]
        _write_record(root, run)
        resume = False
    if result is None:  # every stage had ended: the tables as they are
        from results.io.files import read_experiment as read

        frames = read(root)
        result = ExperimentResult(root, frames["trials"], frames["epochs"],
                                  frames["predictions"], wall_s=0.0)
    return result


class Tuned(Strategy):
    """Tuned ablations: the stages of :func:`run_stages`; the verdicts of the evaluation at
    the configuration given, with those at each arm's own best beside them."""

    kind = "tuned"
    tensorboard_dir = ""  # the experiment's folder: every stage's Tune folder

    def __init__(self, run: TunedRun, root: str = "") -> None:
        self.run, self.root = run, root

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
                say: Callable[[str], None] = print) -> ExperimentResult:
        from ablations.experiment.options import experiment_dir

        return run_stages(self.run, options, skipped, resume=resume,
                          root=self.root or experiment_dir(options), say=say)

    def count(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
              crossed: bool = False) -> str:
        arms = len(self.run.arms())
        evaluation = len(self.run.plan)
        return (f"{arms} variants x {len(seeds)} seeds, each tuned with {self.run.budget} "
                f"trials: {evaluation} + {arms * self.run.budget} + {evaluation} trials")

    def design_lines(self, alpha: float) -> list[str]:
        run = self.run
        ranges = "; ".join(f"{key} {kind} {list(args)}" for key, (kind, args)
                           in run.space.items())
        return [f"Tuned ablations: every arm searched with Optuna TPE, {run.budget} trials "
                f"each ({startup_trials(run.budget)} random first), FIFO, on {run.metric}, "
                f"at seed {run.seed} (no evaluation seed); over {ranges}. Then every arm at "
                "its own best at the evaluation seeds. The evaluation at the configuration "
                "given:"]

    def describe(self, trials: Sequence[TrialSpec], base: Any,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        return Grid().describe(trials, base, skipped)

    def summary_lines(self, trials_df: Any, *, metric: str, margin: Any,
                      alpha: float) -> list[str]:
        from results.stats.phases import side_by_side, side_by_side_text

        try:
            table = side_by_side(trials_df, keys=self.run.keys, reference=self.run.reference,
                                 metric=metric, margin=margin, alpha=alpha)
        except (ValueError, KeyError) as exc:
            return [f"\nNo tuned comparison: {exc}"]
        return ["", *side_by_side_text(table).splitlines()]


def check_request(args: Any, space: Any, trials: Sequence[Any], *, auto: bool) -> None:
    """Refuse, before anything runs, a ``--tune-each`` request this run kind cannot serve:
    with a search space, ``--seeds auto`` (``auto``), a factorial design, crossed seeds, a null
    control or ``--auto-batch``; fewer than two variants among ``trials``; or a reference
    that cannot run.

    Raises:
        UsageError: the first of those, in one line.
    """
    refused = {"a search space": space.is_search, "--seeds auto": auto,
               "--design factorial": args.design != "table",
               "--cross-seeds": args.cross_seeds, "--null-control": args.null_control,
               "--auto-batch": args.auto_batch}
    for what, given in refused.items():
        if given:
            raise UsageError(f"--tune-each tunes the arms of an ablation table at fixed "
                             f"seeds; it does not combine with {what} (yet)")
    if len({s.variant for s in trials}) < 2:
        raise UsageError("--tune-each: fewer than two variants would run; there is "
                         "nothing to compare (see --only)")
    if space.reference not in {s.variant for s in trials}:
        raise UsageError(f"--tune-each: the reference {space.reference!r} cannot run "
                         "here; every arm is compared with it")
