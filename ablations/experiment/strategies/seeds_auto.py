"""``--seeds auto``: an ablation table run in rounds, seeds added only where they decide.

Round 1 (the pilot) runs every variant at the design's first ``n_1`` seeds. After each round,
:func:`results.stats.sequential_table.sequential_verdict_table` gives every variant its verdict so
far; the variants still ``inconclusive`` (with at least two ok or diverged trials) and the
reference run the next look's seeds as the next round; a variant with a verdict stops. The
design (looks, α shares) is fixed before the pilot and recorded in experiment.json
(``sequential``), with each round's trials and Tune folder (``tune`` for the pilot,
``tune-round<k>`` after), so ``--resume`` continues the round a stop cut short and then decides
exactly as an uninterrupted run would: the decisions are a function of the trials' results
only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd

from ablations.experiment.options import TUNE_SUBDIR, ExperimentResult, RunOptions
from ablations.experiment.runner import run_experiment, trial_plan
from ablations.experiment.strategies.base import Strategy
from ablations.experiment.strategies.grid import Grid
from results.io.files import (
    METADATA_FILE,
    TRIALS_FILE,
    is_file,
    join,
    read_experiment,
    read_metadata,
    write_json_atomic,
)
from results.stats.sequential import SeedDesign
from results.stats.sequential_table import active_arms, sequential_verdict_table
from search_spaces import TrialSpec

UNFINISHED = ("interrupted", "not_started")


@dataclass
class SequentialRun:
    """What experiment.json's ``sequential`` records: the design and the rounds so far."""

    design: SeedDesign
    seeds: list[int]  # the seed order: look k runs seeds[:looks[k]]
    reference: str
    metric: str
    margin: str
    alpha: float
    plan: dict[str, TrialSpec]  # every cell up to max_seeds, by trial name
    rounds: list[dict[str, Any]] = field(default_factory=list)  # round, tune, trials, active
    # A fixed-seed experiment continued with --seeds auto (ablations/experiment/continuing.py): its
    # seeds,
    # trials, CPU/GPU-hours and command before the continuation; None for one started auto.
    continued: Optional[dict[str, Any]] = None

    def record(self) -> dict[str, Any]:
        record = {"design": self.design.to_dict(), "seeds": self.seeds,
                  "reference": self.reference, "metric": self.metric, "margin": self.margin,
                  "alpha": self.alpha, "plan": trial_plan(self.plan.values()),
                  "rounds": self.rounds}
        if self.continued is not None:
            record["continued"] = self.continued
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> SequentialRun:
        from ablations.config import TrialConfig

        plan = {}
        for name, values in record["plan"].items():
            config = TrialConfig.from_dict(values)
            plan[name] = TrialSpec(name, config.ablation, config.seed, config)
        return cls(SeedDesign.from_dict(record["design"]), list(record["seeds"]),
                   record["reference"], record["metric"], record["margin"],
                   float(record["alpha"]), plan, list(record["rounds"]),
                   record.get("continued"))

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
        return sequential_verdict_table(trials, self.design, self.seeds,
                                        reference=self.reference, metric=self.metric,
                                        margin=self.margin, alpha=self.alpha)


def next_arms(table: pd.DataFrame, ran: Sequence[str]) -> list[str]:
    """Variants that get the next look's seeds: those of the round just run (``ran``) with no
    verdict yet and at least two outcomes, ok or diverged (a diverged seed is evidence, so an
    arm whose training diverges goes on; a variant whose trials fail for the machinery gets no
    more seeds to fail on; a variant that stopped never resumes)."""
    rows = table.set_index("ablation")
    outcomes = rows["n_ok"] + (rows["n_diverged"] if "n_diverged" in rows else 0)
    return [arm for arm in active_arms(table) if arm in set(ran) and outcomes[arm] >= 2]


def _earlier_rows(root: str, names: set[str]) -> tuple[pd.DataFrame, ...] | None:
    """The rows of the earlier rounds' trials (``names``) from the experiment's files."""
    if not is_file(join(root, TRIALS_FILE)):
        return None
    frames = read_experiment(root)
    return tuple(frames[key][frames[key]["trial_name"].isin(names)]
                 for key in ("trials", "epochs", "predictions"))


def run_rounds(run: SequentialRun, options: RunOptions,
               skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
               root: str, say: Any = print, finished: Optional[ExperimentResult] = None
               ) -> tuple[ExperimentResult, Optional[pd.DataFrame]]:
    """Run the rounds (or continue them after a stop) until every variant has a verdict or
    ran the design's last look. Returns the experiment's result (all rounds' rows) and the
    verdict table the last round ended with (None when the run was stopped in a round, or
    no verdict is possible, e.g. every reference trial failed).

    ``finished``: the rows of the last recorded round, complete (a fixed-seed experiment
    continued with --seeds auto: its trials are round 1); they are decided on as they are,
    not run through Tune again, and ``run``'s record is written to experiment.json first."""
    arms = list(dict.fromkeys(s.variant for s in run.plan.values() if s.variant != run.reference))
    if finished is not None:
        number = len(run.rounds)
        current = [run.plan[name] for name in run.rounds[-1]["trials"]]
        _write_record(root, run)
    elif resume and run.rounds:
        number = len(run.rounds)
        current = [run.plan[name] for name in run.rounds[-1]["trials"]]
    else:
        number, resume = 1, False
        current = run.cells([run.reference, *arms], run.look_seeds(1))
        run.rounds = [{"round": 1, "tune": TUNE_SUBDIR, "trials": [s.name for s in current]}]
    wall_s = 0.0  # the driver's time in Tune over this call's rounds
    while True:
        earlier = [run.plan[name] for r in run.rounds[:-1] for name in r["trials"]]
        this_round = Round(number, run.rounds[-1]["tune"], earlier,
                           _earlier_rows(root, {s.name for s in earlier}) if earlier else None,
                           run.record())
        looks = run.design.looks
        kept = " (the fixed run's trials, kept, not run again)" if finished is not None else ""
        say(f"Round {number} of at most {len(looks)}{kept}: {len(current)} trials "
            f"({len({s.variant for s in current})} variants, seeds "
            f"{seed_span(run.look_seeds(number))}; {looks[number - 1]} seeds per variant so far)")
        if finished is not None:
            result, finished = finished, None
            result.wall_s = 0.0
        else:
            result = run_experiment(current, options, skipped, strategy=this_round,
                                    resume=resume)
        wall_s += result.wall_s
        result.wall_s = wall_s
        if result.trials["status"].isin(UNFINISHED).any():
            return result, None  # stopped: --resume continues this round
        try:
            table = run.verdicts(result.trials)
        except ValueError as exc:  # e.g. every reference trial failed: nothing to decide on
            say(f"No verdicts after round {number} ({exc}): no more rounds")
            return result, None
        ran = {s.variant for s in current}
        following = next_arms(table, ran)
        decided = table[table["ablation"].isin(ran - {run.reference, *following})]
        say(f"Round {number}: " + (", ".join(
            f"{a} {v}" for a, v in zip(decided["ablation"], decided["verdict"]))
            or "no verdict yet"))
        if not following or number == len(looks):
            if following:
                say(f"{len(following)} variant(s) ran {looks[-1]} seeds (--max-seeds) without "
                    f"a verdict: {', '.join(following)}")
            return result, table
        number += 1
        current = run.cells([run.reference, *following], run.look_seeds(number))
        run.rounds.append({"round": number, "tune": f"{TUNE_SUBDIR}-round{number}",
                           "trials": [s.name for s in current]})
        resume = False
        say(f"{len(following)} variant(s) get seeds {seed_span(run.look_seeds(number))}: "
            f"{', '.join(following)}")


class Round(Grid):
    """One round of a ``--seeds auto`` experiment: its trials as a grid, in its own Tune folder
    (``tune`` for the pilot, ``tune-round<k>`` after), its number in the ``round`` column, the
    earlier rounds' rows kept before its own and their trials in experiment.json's plan."""

    kind = "round"

    def __init__(self, number: int, tune_subdir: str, earlier: list[TrialSpec],
                 earlier_rows: Optional[tuple], record: dict[str, Any]) -> None:
        self.round_number, self.tune_subdir = number, tune_subdir
        self.earlier, self.earlier_rows, self.sequential_record = earlier, earlier_rows, record

    def record(self, metadata: dict[str, Any], trials: Sequence[TrialSpec]) -> None:
        metadata["trials"] = {**trial_plan(self.earlier), **metadata["trials"]}
        metadata["seeds"] = sorted({spec.seed for spec in [*self.earlier, *trials]})
        metadata["sequential"] = self.sequential_record


class SeedsAuto(Strategy):
    """``--seeds auto``: the rounds of :func:`run_rounds`, each a :class:`Round`; the
    verdicts are the sequential design's (its metric, margin and alpha)."""

    kind = "seeds-auto"
    tensorboard_dir = ""  # the experiment's folder: every round's Tune folder

    def __init__(self, run: SequentialRun, root: str = "",
                 finished: Optional[ExperimentResult] = None) -> None:
        self.run, self.root, self.finished = run, root, finished

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
                say: Any = print) -> ExperimentResult:
        from ablations.experiment.options import experiment_dir

        result, _ = run_rounds(self.run, options, skipped, resume=resume,
                               root=self.root or experiment_dir(options), say=say,
                               finished=self.finished)
        return result

    def count(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
              crossed: bool = False) -> str:
        looks = self.run.design.looks
        return (f"{len({s.variant for s in self.run.plan.values()})} variants, seeds in "
                f"rounds ({looks[0]} seeds, then up to {looks[-1]} where no verdict yet)")

    def design_lines(self, alpha: float) -> list[str]:
        from results.stats.sequential import design_note

        return [f"{design_note(self.run.design, alpha)} The pilot's trials:"]

    def describe(self, trials: Sequence[TrialSpec], base: Any,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        return Grid().describe(trials, base, skipped)

    def verdict_settings(self, metric: str, margin: Optional[str], alpha: float,
                         reference: str) -> tuple[str, str, Any, float, Optional[dict]]:
        run = self.run  # the decisions' own reference, metric, margin and alpha
        return run.reference, run.metric, run.margin, run.alpha, run.record()


def _write_record(root: str, run: SequentialRun) -> None:
    """experiment.json made sequential before any round runs: a stop from here on is
    continued by plain --resume, and a run whose first look decides every variant still
    reads as the sequential experiment it became."""
    meta = read_metadata(root) or {}
    meta["sequential"] = run.record()
    meta["resumed_at"] = [*meta.get("resumed_at", []),
                          dt.datetime.now(dt.timezone.utc).isoformat()]
    write_json_atomic(meta, join(root, METADATA_FILE))


def seed_span(seeds: Sequence[int]) -> str:
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)
