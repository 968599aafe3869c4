"""What every tracker sees of a trial, and :class:`TrialTracker`, a tracker of one's own in
four methods: the trial's row of trials.parquet as parameters, its metrics without Tune's
bookkeeping at step = epoch, its labels as tags. Loads Ray Tune's logger, not MLflow or W&B."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd
from ray.tune.logger import LoggerCallback
from ray.tune.result import AUTO_RESULT_KEYS

from ablations.config.statuses import TrialStatus
from ablations.experiment.execution.reported import unpacked
from ablations.results.io.files import read_metadata

# Keys of a result that are not the trial's metrics: Tune's bookkeeping, wall-clock stamps.
NOT_METRICS = frozenset({*AUTO_RESULT_KEYS, "done", "should_checkpoint", "trial_id",
                         "experiment_tag", "reported_at", "started_at"})


@dataclass(frozen=True)
class TrackerSpec:
    """One ``--log-to`` value."""

    kind: str  # "mlflow" or "wandb"
    # mlflow: the tracking URI, absolute ("" = SQLite in the experiment folder);
    # wandb: the project ("" = ablations.experiment.trackers.specs.DEFAULT_WANDB_PROJECT)
    target: str = ""

    def to_dict(self) -> dict[str, str]:
        """As experiment.json's ``log_to`` keeps it (the target resolved)."""
        return {"kind": self.kind, "target": self.target}


def tracked_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers a trial reported (train/val metrics each epoch, test and final metrics at
    the last), without Tune's bookkeeping (training_iteration, time_total_s, pid, ...)."""
    return {key: float(value) for key, value in unpacked(result).items()
            if key not in NOT_METRICS and isinstance(value, numbers.Real)
            and not isinstance(value, bool)}


def trial_plan(root: str) -> dict[str, dict[str, Any]]:
    """Trial name -> ``TrialConfig.to_dict()``, from the experiment.json at ``root`` (written
    before each Tuner starts), as its design recorded it (a search's trials: the base config
    and sampled params)."""
    from ablations.experiment.designs.records import design_from_record

    meta = read_metadata(root) or {}
    return design_from_record(meta, root).recorded_plan(meta) if meta else {}


def trial_params(trial: Any, plan: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A Tune trial's ``TrialConfig.flat()``: what trials.parquet has for it."""
    from ablations.experiment.execution.trainable import trial_config

    return trial_config(trial.config, plan).flat()


class TrialTracker(LoggerCallback):
    """A tracker of one's own in four methods, on Ray Tune's ``LoggerCallback``: each trial
    as the runner's trial (its name, its row of trials.parquet as ``params``, its labels as
    ``tags``), its metrics without Tune's bookkeeping at step = epoch, its status at the
    end. Register it with a :class:`~ablations.experiment.trackers.registry.TrackerKind`
    whose ``make`` is the class (docs/trackers.md). Runs on the driver, in Tune's loop: a
    slow call slows the run; what ``publish`` raises of ``errors`` is a warning."""

    errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, *, target: str, root: str, experiment: str, space: str) -> None:
        self.target, self.root, self.experiment, self.space = target, root, experiment, space

    # ---------------------------------------------------------------- to override
    def trial_started(self, trial: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        """A trial started (again, after a retry or a resume: the same name)."""

    def trial_reported(self, trial: str, metrics: dict[str, float], step: int) -> None:
        """A trial's report: each epoch's train and validation metrics, the last adds the
        test and final ones."""

    def trial_ended(self, trial: str, status: str) -> None:
        """A trial ended: ``ok``, ``diverged``, ``failed``, ...."""

    def describe(self) -> str:
        return f"{type(self).__name__}: {self.target or 'its default'}"

    def publish(self, files: dict[str, str], verdicts: Optional[pd.DataFrame],
                across: Optional[pd.DataFrame] = None) -> None:
        """The experiment's verdicts (summary.txt, verdicts.csv, verdicts.md in ``files``)."""

    # ---------------------------------------------------------------- Tune's hooks
    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.plan = trial_plan(self.root)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()  # Tune pickles it (tuner.pkl): not an earlier fit's plan
        state.pop("plan", None)
        return state

    def log_trial_start(self, trial: Any) -> None:
        if getattr(self, "plan", None) is None:
            self.setup()
        params = trial_params(trial, self.plan)
        tags = {"experiment": self.experiment, "space": self.space, "trial_name": str(trial),
                "variant": str(params["ablation"]), "seed": str(params["seed"]),
                **({"dataset": str(params["dataset"])} if params.get("dataset") else {})}
        self.trial_started(str(trial), params, tags)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        self.trial_reported(str(trial), tracked_metrics(result),
                            int(result.get("epoch", iteration)))

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        status = TrialStatus.FAILED if failed else unpacked(trial.last_result).get(
            "status", TrialStatus.OK)
        self.trial_ended(str(trial), str(status))
