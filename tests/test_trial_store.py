"""The trial store (ablations/experiment/provenance/trial_store.py): an experiment under the same
storage as a finished one trains only the trials whose identity no earlier experiment finished, and
its verdicts equal those of a fresh run of its whole table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ablations import Experiment
from ablations.experiment.api import Resources
from ablations.config import TrialConfig
from ablations.experiment.provenance.trial_store import trial_key
from tests.conftest import tiny_config, write_data_dir

TINY = {"epochs": 2, "batch_size": 16, "synthetic_train": 96, "synthetic_val": 32,
        "synthetic_test": 48, "cnn_widths": "8,16,16", "embed_dim": 16, "num_heads": 2,
        "eval_batch_size": 64}


def run(storage, name, only, events=None, log_to=(), **kwargs):
    return Experiment("components", seeds=2, only=only, overrides=TINY, storage=storage,
                      name=name, resources=Resources(**kwargs), log_to=log_to
                      ).run(on_event=(events if events is not None else []).append)


@pytest.fixture(scope="module")
def runs(ray_local, tmp_path_factory):
    """A table, the same table plus a variant under the same storage, and a fresh run of the
    larger table there with reuse off (every trial trained again)."""
    shared = tmp_path_factory.mktemp("store")
    first = run(shared, "first", ["baseline", "no_images"])
    told = []
    second = run(shared, "second", ["baseline", "no_images", "no_scalars"], events=told)
    fresh = run(shared, "again", ["baseline", "no_images", "no_scalars"], reuse=False)
    return first, second, fresh, [str(event) for event in told]


@pytest.mark.slow
def test_a_table_plus_a_variant_trains_only_the_new_arm(runs):
    first, second, _, told = runs
    rows = second.trials.set_index("trial_name")
    trained = rows[rows["reused_from"] == ""]
    assert sorted(trained.index) == ["no_scalars-seed0", "no_scalars-seed1"]
    reused = rows[rows["reused_from"] != ""]
    assert sorted(reused.index) == sorted(first.trials["trial_name"])
    assert (reused["reused_from"] == "first/" + reused.index).all()
    assert (rows["experiment"] == "second").all()
    # a reused trial's numbers are the first run's, its epochs and predictions carried over
    earlier = first.trials.set_index("trial_name")
    for column in ("test_mae", "val_loss", "trial_key", "code_fingerprint"):
        assert reused[column].to_dict() == earlier.loc[reused.index, column].to_dict()
    assert set(second.epochs["trial_name"]) == set(rows.index)
    assert set(second.predictions["trial_name"]) == set(rows.index)
    assert (second.epochs["experiment"] == "second").all()
    assert "4 of 6 trials reused from first; 2 to train" in told


@pytest.mark.slow
def test_the_verdicts_equal_a_fresh_run_of_the_whole_table(runs):
    _, second, fresh, _ = runs
    assert (fresh.trials["reused_from"] == "").all()  # every trial of the fresh run trained
    pd.testing.assert_frame_equal(second.verdicts, fresh.verdicts, check_exact=True)
    numbers = ["trial_name", "test_mae", "test_rmse", "val_loss", "trial_key"]
    pd.testing.assert_frame_equal(second.trials[numbers].reset_index(drop=True),
                                  fresh.trials[numbers].reset_index(drop=True))


def test_the_key_changes_with_what_the_trial_computes():
    config = tiny_config()
    base = dict(code_fingerprint="c", data_source="synthetic:x", data_fingerprint="d",
                packages={"torch": "2.13.0", "numpy": "2.0"}, python_version="3.11.7")
    key = trial_key(config, **base)
    assert key == trial_key(config.replace(ablation="renamed"), **base)  # a name only
    for other in (trial_key(config.replace(seed=1), **base),
                  trial_key(config.replace(epochs=3), **base),
                  trial_key(config, **{**base, "code_fingerprint": "changed"}),
                  trial_key(config, **{**base, "data_fingerprint": "changed"}),
                  trial_key(config, **{**base, "packages": {"torch": "2.12.0",
                                                            "numpy": "2.0"}}),
                  trial_key(config, **{**base, "python_version": "3.12.0"}),
                  trial_key(config, **base, conditions={"isolated": True})):
        assert other != key
    from types import SimpleNamespace

    from ablations.experiment.provenance.trial_store import conditions_of

    # 1 CPU is 1 CPU, from the library's int or the command line's float
    written = [conditions_of(SimpleNamespace(cpus_per_trial=cpus, gpus_per_trial=gpus,
                                             reuse_workers=True))
               for cpus, gpus in ((1, 0), (1.0, 0.0))]
    assert trial_key(config, **base, conditions=written[0]) == \
        trial_key(config, **base, conditions=written[1])


def test_a_rows_identity_takes_the_packages_and_data_its_trial_was_trained_with():
    """A trial finished before a resume under upgraded packages or changed data: its row's
    key is that of what it computed, not of what the resuming driver has."""
    from types import SimpleNamespace

    from ablations.experiment.provenance.trial_store import row_key, run_labels, trained_packages

    config = tiny_config()
    options = SimpleNamespace(cpus_per_trial=1, gpus_per_trial=0, reuse_workers=True)
    source = "synthetic:x"
    then = {"packages": {"torch": "2.13.0", "numpy": "2.0", "pandas": "2.2"},
            "data": {source: {"fingerprint": "old"}}}
    now = {"packages": {"torch": "2.14.1", "numpy": "2.0"}, "data": {source: {"fingerprint":
                                                                            "new"}}}
    labels = run_labels({"baseline-seed0": config}, then)
    assert trained_packages(labels["baseline-seed0"]) == {"torch": "2.13.0", "numpy": "2.0"}
    row = {"code_fingerprint": "c", "data_source": source, "data_fingerprint": "old"}
    resumed = {"provenance": now, "python_version": "3.11.7"}
    kept = row_key(config, row, resumed, options,
                   packages=trained_packages(labels["baseline-seed0"]))
    assert kept == trial_key(config, code_fingerprint="c", data_source=source,
                             data_fingerprint="old", packages=then["packages"],
                             python_version="3.11.7", conditions={"cpus": 1.0, "gpus": 0.0,
                                                                  "isolated": False})
    assert kept != row_key(config, row, resumed, options)  # the resuming driver's versions
    assert trained_packages({}) is None and trained_packages({"trained_packages": "x"}) is None


def test_the_summary_counts_a_grown_tables_own_trials_as_kept_also_those_it_once_reused():
    from ablations.experiment.provenance.trial_store import Reused

    taken = {"a-seed0": ["h", "a-seed0", "g/a-seed0"],  # h reused it from g, h keeps it
             "b-seed0": ["h", "b-seed0", ""],  # trained in h
             "c-seed0": ["g", "c-seed0", "g/c-seed0"]}  # taken from g now
    frame = pd.DataFrame()
    reused = Reused(frame, frame, frame, taken)
    assert reused.summary(4, "h") == "2 of 4 trials kept, 1 reused from g; 1 to train"
    assert reused.summary(3, "new") == "3 of 3 trials reused from g, h; 0 to train"


def test_a_model_plugin_or_a_notebook_function_gives_its_trials_no_identity():
    """Code outside the fingerprint (a model plugin's module, a function defined in a
    notebook) could change unseen: such trials are never reused."""
    from ablations.experiment.core.options import RunOptions
    from ablations.experiment.provenance.trial_store import planned_key

    options = RunOptions(storage="/tmp", name="x", space="s")
    metadata = {"provenance": {"code": {"sha256": "c"}, "own_code": None, "packages": {}}}
    assert planned_key(tiny_config(), metadata, options) is not None  # the built-in model
    plugin = TrialConfig.of(model="examples.conv3d:PLUGIN")
    assert planned_key(plugin, metadata, options) is None
    faulty = TrialConfig.of(model="tests.faulty:FAULTY")  # a function whose files were not read
    assert planned_key(faulty, metadata, options) is None
    recorded = {"provenance": {**metadata["provenance"], "own_code": {"sha256": "o"}}}
    assert planned_key(faulty, recorded, options) is not None
    cut = {"provenance": {**metadata["provenance"],  # a walk that stopped early
                          "own_code": {"sha256": "o", "truncated": True}}}
    assert planned_key(faulty, cut, options) is None


def test_own_codes_identity_takes_the_versions_of_what_it_imports():
    """A scikit-learn or Lightning upgrade changes what own code computes: its planned key
    changes, the key its finished row gets from what the trainable sent (run_labels) is the
    planned one, and the built-in model's key ignores what own code imports."""
    from ablations.experiment.core.options import RunOptions
    from ablations.experiment.provenance.provenance import trial_columns
    from ablations.experiment.provenance.trial_store import planned_key, row_key, run_labels, \
        trained_packages

    options = RunOptions(storage="/tmp", name="x", space="s")
    own = TrialConfig.of(model="tests.faulty:FAULTY")
    imported = {"sha256": "o", "packages": {"scikit-learn": "1.9.1", "numpy": "2.0"}}
    provenance = {"code": {"sha256": "c"}, "packages": {"torch": "2.13.0", "numpy": "2.0"},
                  "own_code": imported}
    metadata = {"provenance": provenance, "python_version": "3.11.7"}
    key = planned_key(own, metadata, options)
    upgraded = {**imported, "packages": {"scikit-learn": "1.10.0", "numpy": "2.0"}}
    assert key != planned_key(own, {**metadata, "provenance": {**provenance,
                                                               "own_code": upgraded}}, options)
    labels = run_labels({"baseline-seed0": own}, provenance)["baseline-seed0"]
    assert trained_packages(labels) == {"torch": "2.13.0", "numpy": "2.0",
                                        "scikit-learn": "1.9.1"}
    row = trial_columns(provenance, own)  # the row's code and data, as tables.trial_row has
    assert row_key(own, row, metadata, options, packages=trained_packages(labels)) == key
    assert row_key(own, row, metadata, options) == key  # a result that sent no versions
    assert planned_key(tiny_config(), metadata, options) == planned_key(
        tiny_config(), {**metadata, "provenance": {**provenance, "own_code": upgraded}}, options)


@pytest.mark.slow
def test_a_resume_keeps_the_rows_it_reused(runs, tmp_path):
    """Resuming the experiment that reused trials: nothing trains, its reused rows stay
    (taken from its own table, where they name their origin), even with the origin gone."""
    import shutil

    first, second, _, _ = runs
    storage = tmp_path / "moved"
    shutil.copytree(second.directory, storage / "second")  # without the experiment `first`
    resumed = Experiment.resume("second", storage=storage)
    assert resumed.trials["reused_from"].tolist() == second.trials["reused_from"].tolist()
    assert resumed.trials["test_mae"].tolist() == second.trials["test_mae"].tolist()
    assert (resumed.trials["status"] == "ok").all()


@pytest.mark.slow
def test_a_resume_after_a_driver_that_died_before_its_tables_keeps_what_it_reused(runs,
                                                                                   tmp_path):
    """A driver killed after its trials trained but before it wrote its tables leaves Tune's
    saved run, which never holds the reused trials: the resume takes them again from where
    reused.json says they came from, and trains nothing."""
    import shutil

    _, second, _, _ = runs
    storage = tmp_path / "killed"
    for name in ("first", "second"):
        shutil.copytree(Path(second.directory).parent / name, storage / name)
    for table in (storage / "second").glob("*.parquet"):  # none written before the kill
        table.unlink()
    resumed = Experiment.resume("second", storage=storage)
    reused = second.trials["reused_from"] != ""
    assert reused.sum() == 4 and (resumed.trials["status"] == "ok").all()
    assert resumed.trials["reused_from"].tolist() == second.trials["reused_from"].tolist()
    assert resumed.trials["test_mae"].tolist() == second.trials["test_mae"].tolist()
    assert resumed.verdicts["verdict"].tolist() == second.verdicts["verdict"].tolist()


@pytest.mark.slow
def test_a_resume_without_reuse_keeps_the_rows_of_a_run_that_reused_every_trial(runs,
                                                                               tmp_path):
    """A run that reused its whole table trained nothing, so Tune saved no run: its resume,
    even with reuse off, keeps those rows (reused.json) instead of training them."""
    import shutil

    first, _, _, _ = runs
    storage = tmp_path / "store"
    shutil.copytree(first.directory, storage / "first")
    copy = run(storage, "copy", ["baseline", "no_images"])
    assert (copy.trials["reused_from"] == "first/" + copy.trials["trial_name"]).all()
    assert not (storage / "copy" / "tune").exists()
    told = []
    resumed = Experiment.resume("copy", storage=storage, resources=Resources(reuse=False),
                                on_event=told.append)
    assert resumed.trials["reused_from"].tolist() == copy.trials["reused_from"].tolist()
    assert resumed.trials["test_mae"].tolist() == copy.trials["test_mae"].tolist()
    assert not (storage / "copy" / "tune").exists(), [str(event) for event in told]


@pytest.mark.slow
def test_a_finished_table_grows_by_a_variant_under_its_name(runs, tmp_path):
    """The table plus a variant run under the finished table's name: only the new arm trains,
    the finished trials are kept as trained there, the verdicts equal a fresh run of the whole
    table, experiment.json and the methods say the family grew, and a resume keeps it all.
    The growth's --log-to (the first run logged nowhere) gets the new arm's trials and the
    verdicts, and experiment.json records it."""
    import json
    import shutil

    from mlflow.tracking import MlflowClient

    from ablations.results.report.methods import methods_text

    first, _, fresh, _ = runs
    storage = tmp_path / "grow"
    shutil.copytree(first.directory, storage / "first")  # no other experiment to reuse from
    told = []
    store = f"sqlite:///{tmp_path / 'grown.db'}"
    grown = run(storage, "first", ["baseline", "no_images", "no_scalars"], events=told,
                log_to=[f"mlflow:{store}"])
    told = [str(event) for event in told]
    assert "4 of 6 trials kept; 2 to train" in told
    assert f"log_to: the new trials (no_scalars) and the verdicts log to mlflow:{store}; " \
        "the kept trials logged to none" in told  # the library's name of --log-to
    client = MlflowClient(store)
    logged = client.search_runs([client.get_experiment_by_name("first").experiment_id])
    assert sorted(r.info.run_name for r in logged) == \
        ["first-verdicts", "no_scalars-seed0", "no_scalars-seed1"]
    assert any(line.startswith("Experiment first grows: the space adds no_scalars (2 new trials")
               for line in told)
    rows = grown.trials.set_index("trial_name")
    assert (rows["reused_from"] == "").all()  # every row trained in this experiment
    earlier = first.trials.set_index("trial_name")
    for column in ("test_mae", "val_loss", "trial_key"):
        assert rows.loc[earlier.index, column].to_dict() == earlier[column].to_dict()
    pd.testing.assert_frame_equal(grown.verdicts, fresh.verdicts, check_exact=True)
    meta = json.loads((storage / "first" / "experiment.json").read_text())
    (entry,) = meta["grown"]
    assert entry["added"] == ["no_scalars"] and entry["tune"] == "tune-grown-1"
    # the new arm's trials ran in a Tune run of their own; the kept ones stayed in tune/
    grown_dirs = {path.name for path in (storage / "first" / "tune-grown-1").iterdir()}
    assert any(d.startswith("no_scalars-seed") for d in grown_dirs), grown_dirs
    assert not any(d.startswith(("baseline-", "no_images-")) for d in grown_dirs), grown_dirs
    assert entry["variants_before"] == ["baseline", "no_images"]
    assert sorted(entry["kept"]) == sorted(earlier.index)
    assert len(meta["trials"]) == 6
    assert meta["log_to"] == [{"kind": "mlflow", "target": store}]
    text = methods_text(meta, grown.trials, grown.verdicts)
    assert "began with 1 comparison with baseline, and no_scalars" in text
    assert "over the 2 comparisons" in text
    resumed = Experiment.resume("first", storage=storage)
    assert resumed.trials["test_mae"].tolist() == grown.trials["test_mae"].tolist()
    assert (resumed.trials["status"] == "ok").all()


@pytest.mark.slow
def test_a_variant_that_skips_its_cell_on_one_of_two_datasets_grows_the_table(ray_local,
                                                                             tmp_path):
    """frames8 cannot run on a dataset of 4 frames (the frames space skips such a cell): added
    to a finished table over that dataset and the synthetic one (8 frames), it trains on the
    synthetic data alone, its other cell is recorded as skipped, and the recorded trials are
    kept."""
    import json

    write_data_dir(tmp_path / "four", n=96, frames=4)

    def frames(only, told):
        return Experiment("frames", seeds=2, only=only, overrides=TINY, storage=tmp_path / "r",
                          data=["synthetic", str(tmp_path / "four")], name="f"
                          ).run(on_event=told.append)

    first = frames(["frames4", "frames2"], [])
    told = []
    grown = frames(["frames4", "frames2", "frames8"], told)
    told = [str(event) for event in told]
    assert "8 of 10 trials kept; 2 to train" in told, told
    rows = grown.trials.set_index("trial_name")
    new = rows[rows["ablation"] == "frames8"]
    assert sorted(zip(new["dataset"], new["status"])) == \
        [("four", "skipped")] * 2 + [("synthetic", "ok")] * 2, new[["dataset", "status"]]
    earlier = first.trials.set_index("trial_name")
    assert rows.loc[earlier.index, "test_mae"].to_dict() == earlier["test_mae"].to_dict()
    meta = json.loads((tmp_path / "r" / "f" / "experiment.json").read_text())
    assert sorted(name for name in meta["skipped"] if "frames8" in name) == \
        ["four.frames8-seed0", "four.frames8-seed1"]
    assert "temporal_frames=8" in next(iter(meta["skipped"].values()))["reason"]


@pytest.mark.slow
def test_a_table_that_changes_a_finished_variant_is_refused_under_its_name(runs, tmp_path):
    import shutil

    from ablations.experiment.core.request import UsageError

    first = runs[0]
    storage = tmp_path / "refuse"
    shutil.copytree(first.directory, storage / "first")
    before = (storage / "first" / "trials.parquet").read_bytes()
    with pytest.raises(UsageError, match="holds a different experiment"):
        Experiment("components", seeds=2, only=["baseline", "no_scalars"], overrides=TINY,
                   storage=storage, name="first").run()
    with pytest.raises(UsageError, match="holds a different experiment"):
        Experiment("components", seeds=3, only=["baseline", "no_images", "no_scalars"],
                   overrides=TINY, storage=storage, name="first").run()
    assert (storage / "first" / "trials.parquet").read_bytes() == before


def test_the_no_reuse_flag_asks_for_no_reuse():
    from ablations.cli.commands import parser_of

    assert parser_of("run").parse_args(["--no-reuse"]).reuse is False
    assert parser_of("run").parse_args([]).reuse is True


@pytest.mark.slow
def test_a_dry_run_of_a_resume_or_a_growth_says_what_it_keeps_and_writes_nothing(
        runs, tmp_path, capsys):
    """``--resume --dry-run`` prints the resume's line and trials and runs nothing; with a
    space that adds a variant (the settings repeated) it says the table grows and which
    trials are kept and which would train; without the settings it gives the run's refusal.
    Not a byte of the experiment's folder changes."""
    import shutil

    from tests.test_cli import in_process

    first = runs[0]
    storage = tmp_path / "dry"
    shutil.copytree(first.directory, storage / "first")
    files = {path: path.read_bytes() for path in (storage / "first").rglob("*")
             if path.is_file()}
    where = ["--storage", str(storage), "--name", "first"]
    settings = ["--seeds", "2", *(part for key, value in TINY.items()
                                  for part in ("--set", f"{key}={value}"))]
    code, out, err = in_process(capsys, "--resume", *where, "--dry-run")
    assert code == 0, err
    assert "Resuming experiment first (components): 4 finished (kept), 0 continue" in out
    assert "Experiment first (dry run of its resume)" in out and "no_images-seed1" in out
    grow = ["--resume", *where, "--space", "components", "--only",
            "baseline,no_images,no_scalars", *settings, "--dry-run"]
    code, out, err = in_process(capsys, *grow)
    assert code == 0, err
    assert "Experiment first grows: the space adds no_scalars (2 new trials)" in out
    assert ("first holds 4 of these 6 trials finished (kept); 2 to train: no_scalars-seed0, "
            "no_scalars-seed1") in out
    same = [*where, "--space", "components", "--only", "baseline,no_images", *settings,
            "--dry-run"]
    code, out, err = in_process(capsys, *same)
    assert code == 0, err
    assert "Resuming experiment first (components): 4 finished (kept), 0 continue" in out
    assert "holds" not in out  # the resume's line says what it keeps, not the growth's
    code, out, err = in_process(capsys, *grow[:-len(settings) - 1], "--dry-run")
    assert code == 2 and "holds a different experiment" in err and "seeds [0, 1]" in err, err
    assert {path: path.read_bytes() for path in (storage / "first").rglob("*")
            if path.is_file()} == files


def test_the_compute_note_says_which_trials_were_reused_and_where_their_hours_were_spent():
    """The report's compute of a --seeds auto run that took trials from other experiments
    counts them, and says their hours were spent there (the console counts those trained
    here)."""
    from ablations.results.stats.sequential_table import compute_note, compute_spent

    trials = pd.DataFrame({"ablation": ["baseline", "baseline", "x", "x"], "status": ["ok"] * 4,
                           "round": [1] * 4, "cpu_hours": [0.1, 0.2, 0.3, 0.4],
                           "gpu_hours": [0.0] * 4,
                           "reused_from": ["a/baseline-seed0", "", "", "a/x-seed1"]})
    note = compute_note(compute_spent(trials, 3), trials)
    assert note.startswith("Compute spent: 4 trials, 1 CPU-hours")
    assert note.endswith(" 2 of these trials were reused from other experiments; their 0.5 "
                         "CPU-hours were spent there, not here."), note
    assert "reused" not in compute_note(compute_spent(trials.assign(reused_from=""), 3), trials
                                        .assign(reused_from=""))


def test_a_trial_continued_from_its_saved_epoch_on_changed_code_is_told_apart(tmp_path):
    """A resume with --allow-changed continues an unfinished trial on the new code from an
    epoch the old code trained: such a trial's result is neither code's, and its final
    result says so (tables.py gives it no identity)."""
    from ablations.experiment.execution.trainable import LABELS_FILE, trained_across_a_change

    first = {"code_fingerprint": "a", "trained_packages": '{"torch": "2.13.0"}'}
    folder = str(tmp_path / "baseline-seed0")
    assert not trained_across_a_change(folder, first, restored=False)
    assert (tmp_path / "baseline-seed0" / LABELS_FILE).is_file()
    assert not trained_across_a_change(folder, first, restored=True)  # a restart, same code
    assert trained_across_a_change(folder, {**first, "code_fingerprint": "b"}, restored=True)
    assert trained_across_a_change(folder, first, restored=True)  # back on a: still mixed
    assert trained_across_a_change(folder, {**first, "trained_packages": '{"torch": "2.14"}'},
                                   restored=True)
    # retried from its start on the new code (no saved epoch): that code's trial
    assert not trained_across_a_change(folder, {**first, "code_fingerprint": "b"},
                                       restored=False)
    assert not trained_across_a_change(str(tmp_path / "older"), first, restored=True)


def test_a_row_keeps_the_python_its_trial_ran_on_after_a_resume_under_another():
    """A trial finished under Python 3.11 keeps 3.11 in its identity when a resume under
    3.12 writes the tables (experiment.json's python_version is then the resuming one's)."""
    from types import SimpleNamespace

    from ablations.experiment.provenance.provenance import trial_columns
    from ablations.experiment.provenance.trial_store import planned_key, row_key, run_labels, \
        trained_packages

    config = tiny_config()
    options = SimpleNamespace(cpus_per_trial=1.0, gpus_per_trial=0.0, reuse_workers=True)
    provenance = {"code": {"sha256": "c"}, "packages": {"python": "3.11.7", "torch": "2.13.0",
                                                        "numpy": "2.0"}}
    started = {"provenance": provenance, "python_version": "3.11.7"}
    labels = run_labels({"baseline-seed0": config}, provenance)["baseline-seed0"]
    row = trial_columns(provenance, config)
    resumed = {"provenance": {**provenance, "packages": {**provenance["packages"],
                                                         "python": "3.12.0"}},
               "python_version": "3.12.0"}
    assert row_key(config, row, resumed, options, packages=trained_packages(labels)) == \
        planned_key(config, started, options)
