"""The hpo space: Optuna TPE through OptunaSearch, ASHA early stopping, the Optuna storage
and the best configuration as a YAML file that --config accepts."""

from __future__ import annotations

import optuna
import pytest

from ablations.config import config_from_sources
from ablations.experiment.designs.search import SearchRun, Search
from ablations.experiment.core.options import RunOptions
from ablations.search_spaces.hpo import HPO_SEARCH
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


def test_hpo_with_asha_writes_optuna_storage_and_best_config(ray_local, tmp_path):
    # a wide lr range, so some samples are clearly worse and ASHA has something to stop
    space = {"lr": ("loguniform", (1e-5, 3e-2)),
             **{k: HPO_SEARCH[k] for k in ("weight_decay", "dropout")}}
    hpo = SearchRun(base=tiny_config(epochs=4, ablation="hpo"), space=space, num_samples=6)
    options = RunOptions(storage=tmp_path, name="search", space="hpo", progress=False,
                         max_concurrent=1)
    result = Search(hpo).execute([], options)
    trials = result.trials
    assert len(trials) == 6 and trials["trial_name"].str.startswith("hpo-").all()
    assert set(trials["status"]) <= {"ok", "stopped"}
    stopped = trials[trials["status"] == "stopped"]
    assert len(stopped) >= 1 and (stopped["epochs_run"] < 4).all()  # ASHA stopped some early
    assert (trials.loc[trials["status"] == "ok", "epochs_run"] == 4).all()
    # the sampled values are the config columns
    assert trials["lr"].nunique() == 6 and trials["lr"].between(1e-5, 3e-2).all()
    # the Optuna study, readable with Optuna's own API (and optuna-dashboard)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{result.directory / 'optuna.db'}")
    assert len(study.trials) == 6
    # the best configuration is a --config file
    best = config_from_sources(yaml_path=result.directory / "best_config.yaml")
    winner = trials[trials["status"] == "ok"].sort_values("val_mae").iloc[0]
    assert best.optim.lr == pytest.approx(winner["lr"]) and best.optim.epochs == 4


def test_a_trial_the_study_finished_before_a_kill_resumes_without_error(tmp_path):
    """A driver killed after Optuna wrote a trial's end but before Tune saved its state: Tune
    resumes the trial, whose first report Ray's OptunaSearch hands to a finished Optuna trial
    (Ray 2.60 raises UpdateFinishedTrialError there, which ended the resumed search); the
    runner's searcher leaves the trial out of the study, which keeps its first result."""
    from ray import tune

    from ablations.experiment.designs.optuna_search import ResumableOptunaSearch

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    search = ResumableOptunaSearch(space={"lr": tune.uniform(0.0, 1.0)}, metric="val_mae",
                                   mode="min", study_name="s", storage=storage, seed=0)
    search.suggest("t1")
    search.on_trial_complete("t1", {"val_mae": 0.5, "training_iteration": 2})
    search._completed_trials.discard("t1")  # Tune's saved state from before the trial ended
    search.on_trial_result("t1", {"val_mae": 0.9, "training_iteration": 1})
    search.on_trial_result("t1", {"val_mae": 0.8, "training_iteration": 2})
    search.on_trial_complete("t1", {"val_mae": 0.8, "training_iteration": 2})
    [trial] = optuna.load_study(study_name="s", storage=storage).trials
    assert trial.value == 0.5 and trial.intermediate_values == {}  # the first result only
