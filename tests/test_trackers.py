"""--log-to: MLflow and W&B through Ray Tune's callbacks (ablations/experiment/trackers/specs.py),
offline. One CLI run (module fixture) logs to three trackers at once: MLflow's default store
(SQLite in the experiment folder), an MLflow file store, and W&B offline; each test reads one of
them back. The flag's bad values and the callbacks' resume behaviour are checked without Ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import platform
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from ablations.results.io.files import SCHEMA_VERSION
from tests.conftest import REPO, tiny_config
from tests.test_cli import assert_one_line_error, in_process, run_cli

# Importing MLflow (in the tests that need it) asks platform for the processor, which
# platform finds with a subprocess (`uname -p`) that a unit test may not start: asked here, as
# the file is collected, it is cached for them.
platform.processor()

VARIANTS = ("baseline", "no_images")
TRIALS = sorted(f"{variant}-seed{seed}" for variant in VARIANTS for seed in (0, 1))
EPOCHS = 2


@pytest.fixture
def runs():
    """ablations.experiment.trackers.runs, imported by the tests that use it: it imports Ray's
    MLflow and W&B integrations (about 2 CPU-seconds), which every test worker would otherwise
    import as it collects this file."""
    from ablations.experiment.trackers import runs

    return runs


@pytest.fixture
def trackers(runs):
    """ablations.experiment.trackers.specs (``runs``' imports and the flag's parsing)."""
    from ablations.experiment.trackers import specs

    return specs


@pytest.fixture(scope="module")
def empty_mlflow_store(tmp_path_factory):
    """An MLflow SQLite store with MLflow's tables made (its migrations take most of a CPU
    second), copied for each test that logs to one (``mlflow_store``)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_store(tmp_path, empty_mlflow_store):
    """A tracking URI of this test's own: a copy of the empty store, in its tmp_path."""
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db"


# ------------------------------------------------------------------------- the flag


def test_log_to_values_are_parsed_and_paths_made_absolute(tmp_path, monkeypatch, trackers,
                                                          runs):
    monkeypatch.chdir(tmp_path)
    parse = trackers.parse_log_to
    assert parse("mlflow") == runs.TrackerSpec("mlflow", "")
    assert parse("mlflow:sqlite:///runs/m.db").target == f"sqlite:///{tmp_path}/runs/m.db"
    assert parse("mlflow:sqlite:////abs/m.db").target == "sqlite:////abs/m.db"
    assert parse("mlflow:store").target == (tmp_path / "store").as_uri()
    assert parse("mlflow:file:///abs/mlruns").target == "file:///abs/mlruns"
    assert parse("mlflow:http://127.0.0.1:5000").target == "http://127.0.0.1:5000"
    assert parse("wandb") == runs.TrackerSpec("wandb", "")
    assert parse("wandb:my-project").target == "my-project"


@pytest.mark.parametrize(("value", "pattern"), [
    ("neptune", "'neptune': use mlflow[:TRACKING_URI] or wandb[:PROJECT]"),
    ("wandb:a/b", "a W&B project name has at most 128 characters"),
    ("mlflow:sqlite:/m.db", "an SQLite store is sqlite:///relative/file.db"),
])
def test_a_bad_log_to_is_one_line_and_exit_2(capsys, tmp_path, value, pattern):
    code, _, err = in_process(capsys, "--log-to", value, "--storage", str(tmp_path / "r"))
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "r").exists()


def test_a_registered_tracker_is_parsed_by_its_name_with_its_own_target_check(monkeypatch,
                                                                             trackers):
    from ablations.experiment.trackers import registry

    monkeypatch.setattr(registry, "TRACKERS", dict(registry.TRACKERS))  # this test's own

    def upper(target: str, text: str) -> str:
        if not target.isalpha():
            raise ValueError(f"{text!r}: a label is letters")
        return target.upper()

    registry.register_tracker(registry.TrackerKind("mine", dict, usage="mine:LABEL",
                                                   target=upper))
    assert trackers.parse_log_to("mine:abc") == trackers.TrackerSpec("mine", "ABC")
    assert trackers.parse_log_to("mine") == trackers.TrackerSpec("mine", "")
    with pytest.raises(ValueError, match="'mine:a1': a label is letters"):
        trackers.parse_log_to("mine:a1")
    with pytest.raises(ValueError, match=r"'other': use mlflow\[:TRACKING_URI\], "
                                         r"wandb\[:PROJECT\] or mine:LABEL "):
        trackers.parse_log_to("other")
    with pytest.raises(ValueError, match="tracker name 'my-tracker'"):
        registry.register_tracker(registry.TrackerKind("my-tracker", dict))


@pytest.mark.parametrize("kind", ["mlflow", "wandb"])
def test_a_tracker_not_installed_names_its_extra(capsys, tmp_path, monkeypatch, kind):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == kind else find_spec(name, *args))
    code, _, err = in_process(capsys, "--log-to", kind, "--storage", str(tmp_path / "r"))
    assert_one_line_error(code, err, f"pip install 'ablation-runner[{kind}]'")
    assert not (tmp_path / "r").exists()


def test_wandb_online_without_a_key_stops_before_ray(capsys, tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no stored login either
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    code, _, err = in_process(capsys, "--log-to", "wandb", "--only", "baseline", "--seeds", "1",
                              "--storage", str(tmp_path / "r"), "--no-dashboard")
    assert_one_line_error(code, err, "no W&B API key")
    assert not (tmp_path / "r").exists()


def test_a_resume_logs_the_verdicts_to_the_trackers_the_experiment_started_with(tmp_path,
                                                                                trackers, runs):
    """Tune restores the callbacks of tuner.pkl on --resume; experiment.json's log_to names
    them, for the verdicts of a resume command without --log-to."""
    root = tmp_path / "exp"
    root.mkdir()
    store = f"sqlite:///{tmp_path}/m.db"
    (root / "experiment.json").write_text(json.dumps(
        {"schema_version": SCHEMA_VERSION, "log_to": [{"kind": "mlflow", "target": store}]}))
    from ablations.experiment.core.events import listening

    said = []
    with listening(said.append):
        ((spec, tracker),) = trackers.tracker_callbacks([], str(root), experiment="exp",
                                                space="components", resume=True)
    assert spec == tracker.spec == runs.TrackerSpec("mlflow", store)
    assert said == []
    with listening(said.append):
        ((spec, tracker),) = trackers.tracker_callbacks([runs.TrackerSpec("mlflow")], str(root),
                                                experiment="exp", space="components",
                                                resume=True)
    assert spec.target == f"sqlite:///{root}/mlruns/mlflow.db"  # the default store
    (warning,) = said
    assert warning.level == "warning"
    assert f"the trackers the experiment started with (mlflow:{store})" in str(warning)
    # a growth's new variants are a Tune run of their own: they log where --log-to says
    said.clear()
    other = f"sqlite:///{tmp_path}/other.db"
    with listening(said.append):
        ((spec, _),) = trackers.tracker_callbacks(
            [runs.TrackerSpec("mlflow", other)], str(root), experiment="exp",
            space="components", resume=True, grown={"added": ["no_scalars"]})
    assert spec == runs.TrackerSpec("mlflow", other)
    (note,) = said
    assert note.level == "info"
    assert str(note).endswith(f": the new trials (no_scalars) and the verdicts log to "
                              f"mlflow:{other}; the kept trials logged to mlflow:{store}")


# ------------------------------------------------------------- the callbacks, without Ray


class FakeTrial:
    """What the callbacks read of a Tune trial."""

    def __init__(self, name: str, trial_id: str) -> None:
        self.name, self.trial_id = name, trial_id
        self.config = {"trial": name}
        self.last_result = {"status": "ok"}

    def __str__(self) -> str:
        return self.name


def test_mlflow_callback_resumes_a_trial_in_its_run(tmp_path, runs, mlflow_store):
    """A second callback on the same experiment (a --resume) continues the trial's run: the same
    run, its params logged once, the metric history going on at the next epoch. A callback that
    has logged pickles (Tune writes its RunConfig to tuner.pkl before every fit)."""
    from mlflow.tracking import MlflowClient
    from ray import cloudpickle

    root = tmp_path / "exp"
    root.mkdir()
    config = tiny_config(ablation="no_images", seed=3, use_images=False)
    (root / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                      "trials": {"t": config.to_dict()}}))
    uri = mlflow_store
    for epochs in ([1], [2]):  # the first run stops after epoch 1, the resume does epoch 2
        tracker = runs.MLflowTracker(tracking_uri=uri, root=str(root), experiment="exp",
                                         space="components")
        tracker.setup()
        trial = FakeTrial("t", "x_00000")
        tracker.log_trial_start(trial)
        for iteration, epoch in enumerate(epochs, 1):  # Tune counts again from 1 on a resume
            tracker.log_trial_result(iteration, trial, {"epoch": epoch, "val_mae": 1.0 / epoch,
                                                        "status": "ok", "pid": 7, "done": False})
        if epochs == [1]:
            tracker.on_experiment_end([trial])  # interrupted
        else:
            tracker.log_trial_end(trial)
        pickle.loads(cloudpickle.dumps(tracker))
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "ok"
    assert run.data.params["ablation"] == "no_images" and run.data.params["use_images"] == "False"
    assert run.data.tags["variant"] == "no_images" and run.data.tags["seed"] == "3"
    history = client.get_metric_history(run.info.run_id, "val_mae")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5)]
    assert "pid" not in run.data.metrics and "status" not in run.data.metrics
    # the default artifact root is beside the database, not ./mlruns of the working directory
    assert client.get_experiment_by_name("exp").artifact_location == \
        (tmp_path / "mlartifacts" / "exp").as_uri()


def test_a_sampled_trial_logs_its_sampled_values(runs):
    plan = {"hpo": tiny_config().to_dict()}
    trial = FakeTrial("hpo", "x_00001")
    trial.config = {"trial": "hpo", "params": {"lr": 0.01, "embed_dim": 8}}
    params = runs.trial_params(trial, plan)
    assert (params["ablation"], params["lr"], params["embed_dim"]) == ("hpo", 0.01, 8)


def test_wandb_callback_logs_at_step_epoch_without_tunes_bookkeeping(runs):
    """W&B's logging actor logs at step = the result's training_iteration: the callback makes
    it the epoch (here a trial resumed at epoch 3, Tune's first iteration since)."""
    tracker = runs.WandbTracker(project="p", root="/nowhere", experiment="e",
                                    space="components")
    trial, queued = FakeTrial("t", "x_00000"), []
    tracker._trial_logging_actors[trial] = None  # started: no actor needed to queue results
    tracker._trial_queues[trial] = SimpleNamespace(put=queued.append)
    tracker.log_trial_result(1, trial, {"epoch": 3, "training_iteration": 1, "val_mae": 0.5,
                                        "pid": 7, "time_total_s": 2.0, "status": "ok"})
    (_, result), = queued
    assert result == {"epoch": 3.0, "training_iteration": 3, "val_mae": 0.5}


# ------------------------------------------------------------------- one real run


def own_tracker() -> str:
    """The tracker of one's own that docs/trackers.md shows, in one file: each trial's start,
    reports and end, and the verdicts, as JSON lines in the file its target names (the page's
    first Python block under "A tracker of one's own")."""
    page = (REPO / "docs" / "trackers.md").read_text()
    section = page.split("## A tracker of one's own", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def installed_tracker(folder: Path) -> Path:
    """``folder`` holding the documented tracker's module and the metadata of a package
    that installed it with an entry point in ``ablations.trackers`` (as pip writes it)."""
    folder.mkdir()
    (folder / "json_tracker.py").write_text(own_tracker())
    info = folder / "json_tracker-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: json-tracker\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ablations.trackers]\njsonlines = json_tracker:KIND\n")
    return folder


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One tiny experiment through the CLI, logged to MLflow's default store (SQLite in the
    experiment folder), an MLflow file store, W&B offline and a tracker of one's own."""
    tmp = tmp_path_factory.mktemp("trackers")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp / "wandb-dir"),
           "WANDB_CONFIG_DIR": str(tmp / "wandb-config"), "WANDB_SILENT": "true"}
    (tmp / "wandb-dir").mkdir()
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        proc = run_cli(
            "--space", "components", "--only", ",".join(VARIANTS), "--seeds", "2",
            "--epochs", str(EPOCHS), "--set", "synthetic_train=64", "--set", "synthetic_val=16",
            "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
            "--set", "batch_size=16", "--name", "tracked", "--no-dashboard", "--margin", "0.5",
            "--storage", str(tmp / "results"), "--log-to", "mlflow",
            "--log-to", f"mlflow:{tmp / 'file-store'}", "--log-to", "wandb:ablation-tests",
            "--log-to", f"jsonlines:{tmp / 'own.jsonl'}",
            cwd=tmp, path=[installed_tracker(tmp / "site")],
        )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert proc.returncode == 0, proc.stderr[-3000:]
    return SimpleNamespace(proc=proc, tmp=tmp, root=tmp / "results" / "tracked")


def mlflow_runs(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tracked")
    return client, {run.info.run_name: run for run in client.search_runs(
        [experiment.experiment_id])}


def check_mlflow(uri: str) -> None:
    client, runs = mlflow_runs(uri)
    assert sorted(runs) == sorted([*TRIALS, "tracked-verdicts"])  # one run per trial
    for name in TRIALS:
        run = runs[name]
        variant, seed = name.split("-seed")
        assert run.info.status == "FINISHED"
        params, tags = run.data.params, run.data.tags
        assert params["ablation"] == variant and params["seed"] == seed  # TrialConfig.flat()
        assert params["lr"] == "0.002" and params["cnn_widths"] == "8,16,16"
        assert params["use_images"] == str(variant != "no_images")
        assert (tags["variant"], tags["seed"], tags["experiment"], tags["space"]) == \
            (variant, seed, "tracked", "components")
        assert tags["status"] == "ok" and tags["verdict"] in ("reference", "equivalent",
                                                              "inconclusive", "worse", "better")
        history = client.get_metric_history(run.info.run_id, "val_mae")
        assert [m.step for m in history] == list(range(1, EPOCHS + 1))  # step = epoch
        assert "test_mae" in run.data.metrics and "training_iteration" not in run.data.metrics
    summary = runs["tracked-verdicts"]
    files = {item.path for item in client.list_artifacts(summary.info.run_id)}
    assert files == {"verdicts.csv", "verdicts.md", "summary.txt"}
    assert summary.data.tags["verdict.baseline"] == "reference"
    table = Path(client.download_artifacts(summary.info.run_id, "verdicts.csv")).read_text()
    assert table.startswith("ablation,") and "\nno_images," in table


@pytest.mark.slow
def test_mlflow_default_store_is_sqlite_in_the_experiment_folder(logged):
    database = logged.root / "mlruns" / "mlflow.db"
    assert database.is_file()
    assert f"MLflow: experiment tracked in sqlite:///{database} (UI: mlflow ui " in \
        logged.proc.stdout
    check_mlflow(f"sqlite:///{database}")
    assert (logged.root / "mlruns" / "mlartifacts" / "tracked").is_dir()


@pytest.mark.slow
def test_a_tracker_of_ones_own_gets_every_trials_metrics_through_the_protocol(logged):
    """Registered by an entry point and written in one file: each trial started with its
    labels, every epoch's report with the values epochs.parquet holds at step = epoch, each
    end, and the verdicts; its describe() line on the console; recorded for a resume."""
    import pandas as pd

    records = [json.loads(line) for line in (logged.tmp / "own.jsonl").read_text().splitlines()]
    assert f"JSON lines: {logged.tmp / 'own.jsonl'}" in logged.proc.stdout
    epochs = pd.read_parquet(logged.root / "epochs.parquet")
    for trial in TRIALS:
        mine = [record for record in records if record.get("trial") == trial]
        variant, seed = trial.split("-seed")
        assert mine[0] == {"event": "start", "trial": trial, "seed": int(seed),
                           "variant": variant}
        assert mine[-1] == {"event": "end", "trial": trial, "status": "ok"}
        reports = [record for record in mine if record["event"] == "report"]
        assert [record["step"] for record in reports] == list(range(1, EPOCHS + 1))
        rows = epochs[epochs["trial_name"] == trial].sort_values("epoch")
        assert [record["metrics"]["val_mae"] for record in reports] == \
            pytest.approx(rows["val_mae"].tolist(), rel=1e-6)
        assert "test_mae" in reports[-1]["metrics"]
        assert "training_iteration" not in reports[-1]["metrics"]
    verdicts, = [record for record in records if record["event"] == "verdicts"]
    assert verdicts["files"] == ["summary.txt", "verdicts.csv", "verdicts.md"]
    assert set(verdicts["verdicts"]) == set(VARIANTS)
    assert verdicts["verdicts"]["baseline"] == "reference"
    recorded = json.loads((logged.root / "experiment.json").read_text())["log_to"]
    assert {"kind": "jsonlines", "target": str(logged.tmp / "own.jsonl")} in recorded


@pytest.mark.slow
def test_mlflow_file_store(logged, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses it otherwise
    check_mlflow((logged.tmp / "file-store").as_uri())


def wandb_records(path: Path):
    """The records of an offline run's .wandb file: W&B's LevelDB-style log (a 7-byte header,
    32 KiB blocks of chunks: CRC32, length, type), each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    position, pieces = 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if left < 7 or (length == 0 and kind == 0):  # the rest of the block is padding
            position += left
            continue
        if position + 7 + length > len(data):
            break  # a chunk still being written
        pieces += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            yield record
            pieces = b""


@pytest.mark.slow
def test_wandb_offline_runs_one_per_trial_and_the_verdicts(logged):
    runs = {}
    for folder in (logged.tmp / "wandb-dir" / "wandb").glob("offline-run-*"):
        (log,) = folder.glob("run-*.wandb")
        # complete once the command has exited: each logging actor waits for W&B's service
        # to write its run out before Ray kills it (trackers/runs.py, _FlushingWandbActor)
        records = list(wandb_records(log))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        history = [{item.nested_key[0] if item.nested_key else item.key: json.loads(
            item.value_json) for item in r.history.item} for r in records
            if r.WhichOneof("record_type") == "history"]
        runs[run.display_name] = SimpleNamespace(run=run, config=config, history=history)
    assert sorted(runs) == sorted([*TRIALS, "tracked-verdicts"])
    assert f"W&B: project ablation-tests, group tracked (offline, in {logged.tmp}/wandb-dir/" \
        "wandb)" in logged.proc.stdout
    for name in TRIALS:
        variant, seed = name.split("-seed")
        logged_run = runs[name]
        assert logged_run.run.project == "ablation-tests" and logged_run.run.run_group == \
            "tracked"
        assert set(logged_run.run.tags) == {f"variant={variant}", f"seed={seed}",
                                            "space=components", "dataset=synthetic"}
        config = logged_run.config
        assert (config["ablation"], config["seed"], config["lr"], config["cnn_widths"]) == \
            (variant, int(seed), 0.002, "8,16,16")
        assert config["experiment"] == "tracked" and config["trial_name"] == name
        assert [row["_step"] for row in logged_run.history] == list(range(1, EPOCHS + 1))
        assert all("val_mae" in row for row in logged_run.history)
        assert "test_mae" in logged_run.history[-1]
    verdicts = runs["tracked-verdicts"]
    assert verdicts.run.job_type == "verdicts"
    assert any("verdicts" in row for row in verdicts.history)  # the wandb.Table


def test_mlflow_tags_each_datasets_verdict_and_the_one_across_them(tmp_path, runs,
                                                                    mlflow_store):
    """Over several datasets (docs/datasets.md): the verdicts run has the verdict across the
    datasets as ``verdict.<variant>`` and each dataset's as ``verdict.<dataset>.<variant>``;
    each trial's run gets its own dataset's verdict."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    root = tmp_path / "exp"
    root.mkdir()
    configs = {f"{d}.no_images-seed0": tiny_config(ablation="no_images", dataset=d,
                                                    use_images=False) for d in ("a", "b")}
    (root / "experiment.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION,
        "trials": {name: config.to_dict() for name, config in configs.items()}}))
    uri = mlflow_store
    tracker = runs.MLflowTracker(tracking_uri=uri, root=str(root), experiment="exp",
                                 space="components")
    tracker.setup()
    for index, name in enumerate(configs):
        trial = FakeTrial(name, f"x_{index:05d}")
        tracker.log_trial_start(trial)
        tracker.log_trial_end(trial)
    verdicts = pd.DataFrame({"dataset": ["a", "b"], "ablation": ["no_images"] * 2,
                             "verdict": ["worse", "inconclusive"]})
    across = pd.DataFrame({"ablation": ["no_images"], "verdict": ["worse"]})
    tracker.publish({"summary.txt": "x\n"}, verdicts, across)
    client = MlflowClient(uri)
    found = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    by_name = {run.data.tags["trial_name"]: run.data.tags for run in found}
    summary = by_name["exp-verdicts"]
    assert summary["verdict.no_images"] == "worse"
    assert summary["verdict.a.no_images"] == "worse"
    assert summary["verdict.b.no_images"] == "inconclusive"
    assert by_name["a.no_images-seed0"]["verdict"] == "worse"
    assert by_name["b.no_images-seed0"]["verdict"] == "inconclusive"
    assert by_name["b.no_images-seed0"]["dataset"] == "b"
