"""--storage s3://bucket/prefix against a real S3-compatible server on 127.0.0.1 (moto's
standalone server, as Ray's own storage tests use): the Parquet files, Tune's state, the trials'
resumable state and the Optuna study land in the bucket; a driver killed mid-run resumes from
the bucket and loses nothing; `report` reads the experiment back from the bucket; a missing
bucket or an unreachable endpoint is one line, exit 2, before anything runs.

The endpoint reaches pyarrow.fs (the runner's files and Ray Tune's) through the standard
AWS_ENDPOINT_URL variable, as a user would set it for MinIO, Ceph or another S3 server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from ablations.experiment.execution.trainable import load_state
from ablations.results.io.files import read_bytes
from tests.conftest import REPO, run_here, start_until

# a moto S3 server in a subprocess for the module; own_ray: the trials of the runs in this
# process (run_here) write to the bucket with the credentials the tests set, which a Ray
# started before them would not pass to its workers
pytestmark = [pytest.mark.slow, pytest.mark.own_ray]

# found, not imported: collecting stays quick (moto.server needs flask)
if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
    pytest.skip("the S3 server of the tests: pip install -e '.[test]'", allow_module_level=True)

BUCKET = "ablations"
TINY = ["--set", "synthetic_train=96", "--set", "synthetic_val=16", "--set", "synthetic_test=16",
        "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "num_heads=2",
        "--set", "batch_size=16", "--no-dashboard"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(**env: str):
    """A moto S3 server on a free port in a process of its own (a killed driver does not take
    it along), with ``env`` added to its environment: yields its endpoint once it answers
    (with a refusal too), and ends it after: SIGTERM, then SIGKILL where it does not exit."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except urllib.error.HTTPError:  # it answers, with its refusal
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:  # the one process this context started
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server, its bucket, and the environment a user would set: endpoint and
    credentials."""
    with moto_server() as endpoint:
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}
        fs = pafs.S3FileSystem(endpoint_override=endpoint, access_key="testing",
                               secret_key="testing", region="us-east-1",
                               allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        yield env, fs


def cli(*args, cwd, env):
    full = {**os.environ, **env, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    return [sys.executable, "-u", str(REPO / "run_ablations.py"), *args], dict(cwd=cwd, env=full)


def objects(fs: pafs.S3FileSystem, prefix: str) -> list[str]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True))
    except FileNotFoundError:
        return []
    return [info.path.removeprefix(prefix + "/") for info in infos
            if info.type == pafs.FileType.File]


def read_parquet(fs: pafs.S3FileSystem, path: str) -> pd.DataFrame:
    return pq.read_table(path, filesystem=fs).to_pandas()


def test_missing_bucket_unreachable_endpoint_and_uri_options_are_one_line(s3, tmp_path):
    env, fs = s3
    command, kw = cli("--space", "components", "--storage", "s3://no-such-bucket/results",
                      *TINY, cwd=tmp_path, env=env)
    missing = subprocess.run(command, capture_output=True, text=True, timeout=120, **kw)
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "Traceback" not in missing.stderr
    assert "bucket 'no-such-bucket' does not exist" in missing.stderr
    assert "Experiment" not in missing.stdout  # nothing planned, nothing started

    with socket.socket() as held:  # bound, never listening: every connection is refused
        held.bind(("127.0.0.1", 0))
        command, kw = cli("--space", "components", "--storage", f"s3://{BUCKET}/results",
                          *TINY, cwd=tmp_path, env={**env, "AWS_ENDPOINT_URL": f"http://"
                                                    f"127.0.0.1:{held.getsockname()[1]}"})
        down = subprocess.run(command, capture_output=True, text=True, timeout=120, **kw)
    assert down.returncode == 2, down.stderr
    assert down.stderr.strip().count("\n") == 0 and "cannot reach bucket" in down.stderr
    assert objects(fs, f"{BUCKET}/results") == []  # nothing written

    command, kw = cli("--space", "components", "--storage",
                      f"s3://{BUCKET}/results?endpoint_override={env['AWS_ENDPOINT_URL']}",
                      *TINY, cwd=tmp_path, env=env)
    query = subprocess.run(command, capture_output=True, text=True, timeout=120, **kw)
    assert query.returncode == 2 and query.stderr.strip().count("\n") == 0, query.stderr
    assert "options in the URI's query are not supported" in query.stderr

    command, kw = cli("report", f"s3://{BUCKET}/results/nothing-here", cwd=tmp_path, env=env)
    report = subprocess.run(command, capture_output=True, text=True, timeout=120, **kw)
    assert report.returncode == 2 and report.stderr.strip().count("\n") == 0, report.stderr
    assert "Traceback" not in report.stderr


def _aws_env(monkeypatch, endpoint: str) -> None:
    for key, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)


def test_an_endpoint_whose_port_reads_403_is_unreachable_not_a_refusal(monkeypatch):
    """A refused connection to 127.0.0.1:403xx names the port in pyarrow's message; the
    bucket's check reads that as an unreachable endpoint, not as credentials refused (which
    it lets through, for credentials scoped to a prefix)."""
    from ablations.results.io.files import check_bucket

    with socket.socket() as held:  # bound, never listening: every connection is refused
        for port in range(40300, 40400):
            try:
                held.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        else:
            pytest.skip("no free port in 40300-40399")
        _aws_env(monkeypatch, f"http://127.0.0.1:{port}")
        with pytest.raises(ValueError, match=rf"cannot reach bucket 'ablations': .*:{port}"):
            check_bucket(f"s3://{BUCKET}/results")


def test_a_google_bucket_that_cannot_be_reached_is_refused_in_seconds_not_minutes(
        tmp_path, monkeypatch):
    """Google Cloud Storage's client retries for 15 minutes by default: offline or without
    credentials, the storage check (a --dry-run too) answers within its own retry limit."""
    import threading
    import uuid

    from ablations.results.io.files import check_bucket

    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud credentials of this machine's user
    # a limit of 1 s (10 s in use): without one, the client's 15 minutes outlast the join below
    monkeypatch.setattr("ablations.results.io.files.GCS_CHECK_S", 1)
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            check_bucket(f"gs://ablations-{uuid.uuid4().hex}/results")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the thread hands it to the test
            outcome.append(exc)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(timeout=180)  # 1 s of retries, on a machine 4x slower, with room
    assert not thread.is_alive(), "the bucket check was still retrying after 3 minutes"
    # refused: unreachable, or (online, with credentials) a bucket that does not exist
    assert isinstance(outcome[0], ValueError), outcome
    assert re.search(r"cannot reach bucket|does not exist", str(outcome[0])), outcome[0]


def test_credentials_the_store_refuses_pass_the_bucket_check(monkeypatch):
    """A store that answers HeadBucket with 403 (moto enforcing its IAM, which knows no
    'testing' key: pyarrow's "AWS Error ACCESS_DENIED during HeadBucket") passes the check:
    credentials for a prefix only may write there without the right to list the bucket."""
    from ablations.results.io.files import check_bucket

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="0") as endpoint:
        _aws_env(monkeypatch, endpoint)
        with pytest.raises(OSError, match="ACCESS_DENIED"):  # what the check is given
            pafs.FileSystem.from_uri(f"s3://{BUCKET}")[0].get_file_info(BUCKET)
        assert check_bucket(f"s3://{BUCKET}/results") is None


def test_killed_then_resumed_from_the_bucket_then_report(s3, tmp_path, monkeypatch):
    """A driver killed with SIGKILL mid-experiment (the driver and the Ray it started, no
    clean-up) continues with --resume from the bucket: every trial ends up in trials.parquet
    exactly once, nothing that had finished is run again, and nothing touches the local disk.
    (The same on a local folder, a Ctrl-C rather than a kill: tests/test_interrupt.py.)"""
    env, fs = s3
    for key, value in env.items():  # this process reads the bucket as the runner does
        monkeypatch.setenv(key, value)
    storage = f"s3://{BUCKET}/results"
    prefix = f"{BUCKET}/results/killed"
    args = ["--space", "components", "--only", "baseline,no_images,single_frame",
            "--seeds", "2", "--epochs", "3", "--name", "killed", "--storage", storage, *TINY]
    command, kw = cli(*args, cwd=tmp_path, env=env)
    # wait until two trials have finished
    proc, seen, deadline = start_until(command, kw, "[2/6]", timeout=240)

    def mid_way():  # trials whose state in the bucket is before their last (3rd) epoch
        found = {}
        for path in objects(fs, prefix):
            if path.startswith("trial_state/") and path.endswith("/state.pt"):
                try:  # the runner's reader; a worker may be replacing the object meanwhile
                    epoch = load_state(f"s3://{prefix}/{path}")["epoch"]
                except (OSError, RuntimeError, EOFError):
                    continue
                if epoch < 3:
                    found[path.split("/")[1]] = epoch
        return found

    # kill while a trial has at least one epoch left to train, however fast this machine is
    while not mid_way() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
    seen.extend(proc.stdout.read().splitlines(keepends=True))
    proc.wait(timeout=30)
    assert any(line.startswith("[2/6]") for line in seen), "".join(seen[-20:])
    stored = objects(fs, prefix)
    assert "experiment.json" in stored and "trials.parquet" not in stored, stored
    assert any(path.startswith("tune/experiment_state-") for path in stored), stored
    done = {line.split()[1] for line in seen if line.startswith("[")}
    cut_off = {}
    for path in stored:  # every trial the kill cut off: its last saved epoch
        name = path.split("/")[1] if path.startswith("trial_state/") else None
        if name and path.endswith("/state.pt") and name not in done:
            # a worker outside the killed process group may still be replacing the object
            cut_off[name] = load_state(f"s3://{prefix}/{path}")["epoch"]
    assert cut_off and all(epoch >= 1 for epoch in cut_off.values()), (cut_off, done)
    assert not (tmp_path / "ablation_results").exists()  # nothing went to the local disk

    # the resume, the rerun, the refusal and the report: a new driver each, in this process
    # (run_here), whose environment holds the bucket's credentials for it and its Ray
    resumed = run_here("--resume", "--name", "killed", "--storage", storage, "--no-dashboard",
                       cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming experiment killed" in resumed.stdout
    trials = read_parquet(fs, f"{prefix}/trials.parquet")
    assert sorted(trials["trial_name"]) == sorted(
        f"{v}-seed{s}" for v in ("baseline", "no_images", "single_frame") for s in (0, 1))
    assert (trials["status"] == "ok").all()
    epochs = read_parquet(fs, f"{prefix}/epochs.parquet")
    assert not epochs.duplicated(["trial_name", "epoch"]).any()
    per_trial = epochs.groupby("trial_name")["epoch"].apply(lambda e: tuple(sorted(e)))
    assert per_trial.map(lambda e: e == (1, 2, 3)).all(), per_trial
    rows = trials.set_index("trial_name")
    # Trials that had finished were not trained again: either Tune's state had them as done
    # (they do not run), or they restart from their final state and only re-evaluate.
    finished_before = {line.split()[1] for line in seen if line.startswith("[")}
    rerun = {line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("[")}
    for name in finished_before:
        assert rows.loc[name, "resumed_from_epoch"] == (3 if name in rerun else 0), name
    # trials cut off mid-way continued from their last saved epoch in the bucket, not from
    # scratch (a worker outside the killed process group may save one more before it notices);
    # one whose last epoch was saved had finished, though the driver died before it said so
    for name, epoch in cut_off.items():
        resumed_from = rows.loc[name, "resumed_from_epoch"]
        assert resumed_from in ({0, 3} if epoch == 3 else {1, 2, 3}), (name, epoch)
        assert resumed_from == 0 or resumed_from >= epoch, (name, epoch, resumed_from)
    assert len(read_parquet(fs, f"{prefix}/predictions.parquet")) > 0

    # The same --name and plan again: nothing left to run, the same rows.
    again = run_here(*args, cwd=tmp_path)
    assert again.returncode == 0 and "resuming it" in again.stdout, again.stderr[-2000:]
    assert len(read_parquet(fs, f"{prefix}/trials.parquet")) == 6
    # The same --name with another plan is refused, and nothing is touched.
    with fs.open_input_stream(f"{prefix}/trials.parquet") as handle:
        before = handle.read()
    other = run_here("--space", "components", "--only", "baseline", "--name", "killed",
                     "--storage", storage, *TINY, cwd=tmp_path)
    assert other.returncode == 2 and "holds a different experiment" in other.stderr
    with fs.open_input_stream(f"{prefix}/trials.parquet") as handle:
        assert handle.read() == before

    report = run_here("report", f"{storage}/killed", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    stored = objects(fs, prefix)
    assert {"report.md", "report.html"} <= set(stored), stored
    figures = {name for name in stored if name.startswith("report_files/")}
    assert {"report_files/forest.png", "report_files/forest.pdf",
            "report_files/forest-column.svg"} <= figures, stored  # --figures all, the default
    with fs.open_input_stream(f"{prefix}/report.md") as handle:
        text = handle.read().decode()
    for variant in ("no_images", "single_frame"):
        assert variant in text
    assert not (tmp_path / "ablation_results").exists()


def test_hpo_study_lands_in_the_bucket(s3, tmp_path, monkeypatch):
    """The Optuna study (SQLite, which needs a local file) lands in the bucket with this
    search's trials only (not a local copy left by an earlier search of the same name);
    best_config.yaml lands beside it."""
    env, fs = s3
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    storage = f"s3://{BUCKET}/search"
    from ablations.experiment.designs.search import optuna_file

    # an earlier search of the same name left its local copy: not to be picked up
    optuna_file(f"{storage}/study", "study").write_bytes(b"an earlier search's study")
    command, kw = cli("--space", "hpo", "--num-samples", "3", "--epochs", "2", "--name",
                      "study", "--storage", storage, *TINY, cwd=tmp_path, env=env)
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, **kw)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    prefix = f"{BUCKET}/search/study"
    stored = set(objects(fs, prefix))
    assert {"optuna.db", "best_config.yaml", "trials.parquet", "experiment.json"} <= stored
    local = tmp_path / "optuna.db"
    local.write_bytes(read_bytes(f"s3://{prefix}/optuna.db"))
    with sqlite3.connect(local) as db:  # the study as Optuna wrote it: one row per trial
        states = [row[0] for row in db.execute("SELECT state FROM trials")]
    assert len(states) == 3 and all(state in ("COMPLETE", "PRUNED") for state in states), states
    assert len(read_parquet(fs, f"{prefix}/trials.parquet")) == 3


def test_optuna_study_uploaded_as_trials_start_and_end(s3, monkeypatch):
    """The callback the runner adds for a URI root: the bucket's study is the local one as
    soon as a trial starts or ends (not only at the end of the search); a failed upload is a
    warning; a resume keeps the local copy or fetches the bucket's, a new search starts empty."""
    from ablations.experiment.designs.search import (
        OPTUNA_FILE,
        fetch_optuna,
        optuna_file,
        optuna_upload,
    )

    env, fs = s3
    for key, value in env.items():  # this process's pyarrow.fs, as the driver's
        monkeypatch.setenv(key, value)
    root, name = f"s3://{BUCKET}/upload/exp", f"upload-{os.getpid()}"
    assert optuna_upload(str(REPO), name) == []  # a local root: the study is the file
    [callback] = optuna_upload(root, name)
    local = optuna_file(root, name)

    def uploaded() -> bytes:
        with fs.open_input_stream(f"{BUCKET}/upload/exp/{OPTUNA_FILE}") as handle:
            return handle.read()

    for event, content in ((callback.on_trial_start, b"trial 1 asked for"),
                           (callback.on_trial_complete, b"trial 1 told"),
                           (callback.on_trial_error, b"trial 2 failed")):
        local.write_bytes(content)
        event(0, [], None)
        assert uploaded() == content
    # another machine (no local copy) resumes from the bucket's copy; this one keeps its own
    local.unlink()
    assert fetch_optuna(root, name, resume=True).read_bytes() == b"trial 2 failed"
    local.write_bytes(b"trial 3 asked for, not uploaded yet")
    assert fetch_optuna(root, name, resume=True).read_bytes() == local.read_bytes()
    # a new search of the same name starts from no study, whatever a local copy holds
    assert not fetch_optuna(root, name).exists()
    # an upload that fails (the endpoint gone) is a warning, not the end of the search
    local.write_bytes(b"trial 4")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    from ablations.experiment.core.events import listening

    heard = []
    with listening(heard.append):
        callback.on_trial_complete(0, [], None)
    assert [event.level for event in heard] == ["warning"], heard
    assert "the Optuna study was not uploaded" in str(heard[0])
    local.unlink()


def test_a_store_that_stops_answering_after_its_check_is_one_usage_error(monkeypatch):
    """The bucket's check passes (the store answered it) and the store is gone when the
    experiment's folder is read: a UsageError naming the storage, not pyarrow's OSError."""
    from ablations.experiment import api
    from ablations.experiment.core import request
    from ablations.experiment.core.request import UsageError

    monkeypatch.setattr(request, "check_bucket", lambda location: None)
    with socket.socket() as held:  # bound, never listening: every connection is refused
        held.bind(("127.0.0.1", 0))
        for key, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{held.getsockname()[1]}",
                           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(key, value)
        experiment = api.Experiment("components", storage=f"s3://{BUCKET}/results",
                                    name="gone", seeds=1, epochs=1)
        with pytest.raises(UsageError, match=r"cannot read s3://ablations/results/gone: ") as err:
            experiment.run()
    assert "\n" not in str(err.value)
