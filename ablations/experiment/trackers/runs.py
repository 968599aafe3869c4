"""The trackers' Tune callbacks: :class:`MLflowTracker` (Ray Tune's
``MLflowLoggerCallback``) and :class:`WandbTracker` (its ``WandbLoggerCallback``), one tracker run
per trial with the trial's flat config as parameters, its metrics at step = epoch and its labels
as tags; ``publish`` adds the experiment's verdicts run. :class:`TrialTracker` is the same
translation for a tracker of one's own. :mod:`ablations.experiment.trackers.specs` parses
``--log-to`` and makes these by name (:mod:`ablations.experiment.trackers.registry`);
docs/trackers.md is the user's guide.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from ray.air.constants import TRAINING_ITERATION
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor

from ablations.config.statuses import TrialStatus
from ablations.experiment.execution.reported import unpacked
from ablations.experiment.trackers.trials import (
    TrackerSpec,
    tracked_metrics,
    trial_params,
    trial_plan,
)
from ablations.results.io.files import is_uri

SUMMARY_SUFFIX = "-verdicts"  # the summary run of an experiment: <experiment>-verdicts
class MLflowTracker(MLflowLoggerCallback):
    """Ray Tune's MLflow callback, one MLflow run per trial in the MLflow experiment named like
    the runner's: the trial's flat config as params, metrics at step = epoch, tags variant,
    seed, trial_name, experiment, space, status. Logs through its own ``MlflowClient`` (one
    ``log_batch`` per report), so two MLflow stores in one command do not mix."""

    def __init__(self, *, tracking_uri: str, root: str, experiment: str, space: str) -> None:
        super().__init__(tracking_uri, experiment_name=experiment,
                         tags={"experiment": experiment, "space": space})
        self.root = root
        self.spec = TrackerSpec("mlflow", tracking_uri)

    def describe(self) -> str:
        where = f"MLflow: experiment {self.experiment_name} in {self.tracking_uri}"
        if not self.tracking_uri.startswith(("file:", "sqlite:")):
            return where  # a server: its own UI
        allow = "MLFLOW_ALLOW_FILE_STORE=true " if self.tracking_uri.startswith("file:") else ""
        return f"{where} (UI: {allow}mlflow ui --backend-store-uri {self.tracking_uri})"

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        from mlflow.exceptions import MlflowException

        return MlflowException, OSError

    def setup(self, *args: Any, **kwargs: Any) -> None:
        from mlflow.tracking import MlflowClient

        # "Creating initial MLflow database tables..." and alembic's migrations: not for the
        # console of a run.
        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        artifacts = None
        if self.tracking_uri.startswith("sqlite:///"):
            database = Path(self.tracking_uri.removeprefix("sqlite:///"))
            database.parent.mkdir(parents=True, exist_ok=True)
            # beside the database, not MLflow's default ./mlruns of the working directory
            artifacts = (database.parent / "mlartifacts" / self.experiment_name).as_uri()
        self.mlflow_util.setup_mlflow(tracking_uri=self.tracking_uri,
                                      experiment_name=self.experiment_name,
                                      artifact_location=artifacts)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        self.plan = trial_plan(self.root)
        self._trial_runs: dict[Any, str] = {}
        self._ended: set[Any] = set()

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its RunConfig (tuner.pkl) before each fit: the settings, not the
        # client and runs of an earlier fit (a --seeds auto round)
        state = self.__dict__.copy()
        for key in ("client", "plan", "_trial_runs", "_ended"):
            state.pop(key, None)
        return state

    def _run_named(self, name: str) -> Optional[str]:
        """The run of this experiment named ``name`` (a trial of a resumed experiment)."""
        runs = self.client.search_runs([self.mlflow_util.experiment_id],
                                       filter_string=f"tags.trial_name = '{name}'",
                                       max_results=1)
        return runs[0].info.run_id if runs else None

    def log_trial_start(self, trial: Any) -> None:
        from mlflow.entities import Param

        self._ended.discard(trial)
        name = str(trial)
        run_id = self._trial_runs.get(trial) or self._run_named(name)
        if run_id is not None:  # restarted (a retry, a resume): the same run, params as logged
            self.client.update_run(run_id, status="RUNNING")
            self._trial_runs[trial] = run_id
            return
        params = trial_params(trial, self.plan)
        tags = {**self.tags, "trial_name": name, "variant": params["ablation"],
                "dataset": str(params.get("dataset", "")), "seed": str(params["seed"])}
        run_id = self.client.create_run(self.mlflow_util.experiment_id, run_name=name,
                                        tags=tags).info.run_id
        self._trial_runs[trial] = run_id
        values = [Param(key, str(value)) for key, value in params.items()]
        for start in range(0, len(values), 100):  # log_batch takes at most 100 params
            self.client.log_batch(run_id, params=values[start:start + 100])

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        if trial not in self._trial_runs:
            self.log_trial_start(trial)
        step = int(result.get("epoch", iteration))
        now_ms = int(time.time() * 1000)
        metrics = [Metric(key, value, now_ms, step)
                   for key, value in tracked_metrics(result).items()]
        self.client.log_batch(self._trial_runs[trial], metrics=metrics)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        run_id = self._trial_runs[trial]
        status = TrialStatus.FAILED if failed else unpacked(trial.last_result).get(
            "status", TrialStatus.OK)
        self.client.set_tag(run_id, "status", str(status))
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
        self._ended.add(trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Runs of trials that did not end (the experiment was interrupted): KILLED; a
        ``--resume`` continues them."""
        for trial, run_id in self._trial_runs.items():
            if trial not in self._ended:
                self.client.set_tag(run_id, "status", str(TrialStatus.INTERRUPTED))
                self.client.set_terminated(run_id, status="KILLED")

    def publish(self, files: dict[str, str], verdicts: Optional[pd.DataFrame],
                across: Optional[pd.DataFrame] = None) -> None:
        """The run ``<experiment>-verdicts`` with ``files`` as artifacts; each trial's run
        gets its variant's verdict as the tag ``verdict`` (filter the runs table by it). Over
        several datasets (``across``: the verdicts across them), the verdicts run's tags are
        ``verdict.<variant>`` across the datasets and ``verdict.<dataset>.<variant>`` on each,
        and a trial's ``verdict`` is its dataset's."""
        if getattr(self, "client", None) is None:  # a resumed Tuner used its pickled copy
            self.setup()
        experiment_id = self.mlflow_util.experiment_id
        name = f"{self.experiment_name}{SUMMARY_SUFFIX}"
        run_id = self._run_named(name) or self.client.create_run(
            experiment_id, run_name=name,
            tags={**self.tags, "trial_name": name, "kind": "verdicts"}).info.run_id
        for file_name, text in files.items():
            self.client.log_text(run_id, text, file_name)
        if verdicts is not None:
            datasets = verdicts["dataset"] if "dataset" in verdicts else [None] * len(verdicts)
            for dataset, variant, verdict in zip(datasets, verdicts["ablation"],
                                                 verdicts["verdict"]):
                where = f"tags.variant = '{variant}'"
                if dataset is None:
                    self.client.set_tag(run_id, f"verdict.{variant}", str(verdict))
                else:
                    self.client.set_tag(run_id, f"verdict.{dataset}.{variant}", str(verdict))
                    where += f" and tags.dataset = '{dataset}'"
                for run in self.client.search_runs([experiment_id], filter_string=where):
                    self.client.set_tag(run.info.run_id, "verdict", str(verdict))
        if across is not None:
            for variant, verdict in zip(across["ablation"], across["verdict"]):
                self.client.set_tag(run_id, f"verdict.{variant}", str(verdict))
        self.client.set_terminated(run_id, status="FINISHED")


class _FlushingWandbActor(_WandbLoggingActor):
    """Ray's W&B logging actor, which then waits until W&B's service process has written the
    run out (``wandb.teardown``). Ray kills the actor as soon as ``run`` returns
    (``WandbLoggerCallback._cleanup_logging_actors``), and ``wandb.finish`` returns before the
    service has flushed the run's file: a kill in that window left an offline run file with its
    7-byte header only (the service's log stopped before "stream: finishing up"). The atexit
    hook that would tear the service down never runs in a killed actor."""

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._wandb.teardown()


class WandbTracker(WandbLoggerCallback):
    """Ray Tune's W&B callback (a logging actor per trial), one W&B run per trial in group
    ``<experiment>`` of ``project``: the trial's flat config (plus trial_name, experiment,
    space) as its config, metrics at step = epoch, tags ``variant=...``, ``seed=...``,
    ``space=...``. Offline (``WANDB_MODE=offline``) the runs are files under ``WANDB_DIR``, else
    under the experiment folder: ``wandb/offline-run-*``, for ``wandb sync``."""

    _logger_actor_cls = _FlushingWandbActor  # Ray's hook for the logging actor's class

    def __init__(self, *, project: str, root: str, experiment: str, space: str) -> None:
        super().__init__(project=project, group=experiment)
        self.root, self.experiment, self.space = root, experiment, space
        self.spec = TrackerSpec("wandb", project)
        # None: WANDB_DIR, or wandb's default (the logging actor's folder) for a URI root
        self.dir = None if os.environ.get("WANDB_DIR") or is_uri(root) else str(root)

    def describe(self) -> str:
        where = "offline, in " if os.environ.get("WANDB_MODE", "").lower() == "offline" else ""
        folder = os.environ.get("WANDB_DIR") or self.dir
        return (f"W&B: project {self.project}, group {self.experiment}"
                + (f" ({where}{folder}/wandb)" if where and folder else ""))

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        import wandb

        return wandb.Error, OSError

    def setup(self, *args: Any, **kwargs: Any) -> None:
        super().setup(*args, **kwargs)
        self.plan = trial_plan(self.root)

    def __getstate__(self) -> dict[str, Any]:
        # as MLflowTracker's: no actors, queues or plan of an earlier fit in tuner.pkl
        state = self.__dict__.copy()
        state.pop("plan", None)
        state["_remote_logger_class"] = None
        for key in ("_trial_logging_actors", "_trial_logging_futures",
                    "_logging_future_to_trial", "_trial_queues"):
            state[key] = {}
        return state

    def log_trial_start(self, trial: Any) -> None:
        params = trial_params(trial, self.plan)
        name = str(trial)
        self._start_logging_actor(  # Ray's; its own log_trial_start logs Tune's config
            trial, ["done", "should_checkpoint", "config"],
            id=trial.trial_id, name=name, resume="allow", allow_val_change=True,
            project=self.project, group=self.experiment, job_type="trial",
            tags=[f"variant={params['ablation']}", f"seed={params['seed']}",
                  f"space={self.space}",
                  *([f"dataset={params['dataset']}"] if params.get("dataset") else [])],
            config={**params, "trial_name": name, "experiment": self.experiment,
                    "space": self.space},
            dir=self.dir,
        )

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        # The logging actor logs at step = the result's training_iteration: make it the epoch
        # (a trial resumed from its state file goes on at its next epoch, not at 1).
        metrics = {**tracked_metrics(result),
                   TRAINING_ITERATION: int(result.get("epoch", iteration))}
        super().log_trial_result(iteration, trial, metrics)

    def publish(self, files: dict[str, str], verdicts: Optional[pd.DataFrame],
                across: Optional[pd.DataFrame] = None) -> None:
        """The run ``<experiment>-verdicts`` (job type verdicts) in the experiment's group:
        the verdict table as a ``wandb.Table``, each variant's verdict in its summary
        (``verdict/<variant>``), and ``files`` as an artifact of type verdicts. Over several
        datasets, the table has a ``dataset`` column, ``verdict/<dataset>/<variant>`` each
        dataset's verdict, ``verdict/<variant>`` the verdict across them and ``across`` that
        table."""
        import wandb

        name = f"{self.experiment}{SUMMARY_SUFFIX}"
        run = wandb.init(project=self.project, group=self.experiment, name=name, id=name,
                         resume="allow", job_type="verdicts", dir=self.dir,
                         config={"experiment": self.experiment, "space": self.space},
                         tags=["verdicts", f"space={self.space}"],
                         settings=wandb.Settings(silent=True))
        try:
            if verdicts is not None:
                # the reference's row has pd.NA in the boolean columns: None for W&B's types
                cells = verdicts.astype(object).where(verdicts.notna(), None)
                run.log({"verdicts": wandb.Table(dataframe=cells)})
                datasets = verdicts["dataset"] if "dataset" in verdicts else [None] * len(
                    verdicts)
                for dataset, variant, verdict in zip(datasets, verdicts["ablation"],
                                                     verdicts["verdict"]):
                    key = f"verdict/{variant}" if dataset is None else \
                        f"verdict/{dataset}/{variant}"
                    run.summary[key] = str(verdict)
            if across is not None:
                cells = across.astype(object).where(across.notna(), None)
                run.log({"across": wandb.Table(dataframe=cells)})
                for variant, verdict in zip(across["ablation"], across["verdict"]):
                    run.summary[f"verdict/{variant}"] = str(verdict)
            artifact = wandb.Artifact(name, type="verdicts")
            for file_name, text in files.items():
                with artifact.new_file(file_name) as handle:
                    handle.write(text)
            run.log_artifact(artifact)
        finally:
            run.finish()
