"""`run_ablations.py report` on what is not a finished experiment (one line, exit 2), on a
storage URI, and its writes atomic; experiment names that are paths refused. No Ray."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

from ablations.cli.main import main
from ablations.results.io.files import SCHEMA_VERSION
from tests.test_analysis import _experiment


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    return _experiment(tmp_path_factory.mktemp("report") / "exp")


def _copy(experiment: Path, tmp_path: Path) -> Path:
    root = tmp_path / "exp"
    shutil.copytree(experiment, root)
    return root


def _set_metric(root: Path, metric: str, value: float, ablation: str) -> None:
    trials = pd.read_parquet(root / "trials.parquet")
    trials.loc[trials["ablation"] == ablation, metric] = value
    trials.to_parquet(root / "trials.parquet", index=False)


def _set_status(root: Path, status: str, ablation: str | None = None) -> None:
    trials = pd.read_parquet(root / "trials.parquet")
    rows = trials["ablation"] == ablation if ablation else slice(None)
    trials.loc[rows, "status"] = status
    trials.to_parquet(root / "trials.parquet", index=False)


# (id, change to a copy of a finished experiment -> the argument, extra args, error regex)
CASES = [
    ("missing folder", lambda root: str(root / "nope"), [],
     r"nope/trials\.parquet: missing; .*nope does not exist"),
    ("a file", lambda root: str(root / "trials.parquet"), [], r"a file, not an experiment folder"),
    ("empty folder", lambda root: (shutil.rmtree(root), root.mkdir(), str(root))[-1], [],
     r"exp/trials\.parquet: missing; is .*exp an experiment folder\?"),
    ("unfinished experiment", lambda root: (
        [(root / f).unlink() for f in ("trials.parquet", "epochs.parquet", "predictions.parquet")],
        (root / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                         "space": "components"})), str(root))[-1],
     [], r"trials\.parquet: missing; the experiment has not finished: continue it with "
         r"python run_ablations.py --resume --name exp --storage /\S+$"),
    ("corrupt trials.parquet", lambda root: ((root / "trials.parquet").write_text("x,y\n1,2\n"),
                                             str(root))[-1],
     [], r"trials\.parquet: not a readable Parquet file"),
    ("truncated predictions.parquet", lambda root: (
        (root / "predictions.parquet").write_bytes(
            (root / "predictions.parquet").read_bytes()[:50]),
        str(root))[-1], [], r"predictions\.parquet: not a readable Parquet file"),
    ("no ok trial", lambda root: (_set_status(root, "failed"), str(root))[-1], [],
     r"no trial finished ok \(8 failed\)"),
    ("reference absent", lambda root: str(root), ["--reference", "nope"],
     r"reference 'nope' is not a variant of this experiment \(variants: baseline, no_x\)"),
    ("reference without ok trial", lambda root: (_set_status(root, "failed", "baseline"),
                                                 str(root))[-1], [],
     r"reference 'baseline' has no ok trial"),
    ("metric absent", lambda root: str(root), ["--metric", "test_accuracy"],
     r"metric 'test_accuracy' is not a numeric column of trials\.parquet"),
    ("metric not numeric", lambda root: str(root), ["--metric", "status"],
     r"metric 'status' is not a numeric column"),
    # own code's trials hold the built-in model's columns empty: name the measured ones
    ("metric never measured", lambda root: ([_set_metric(root, "test_rmse", float("nan"), arm)
                                             for arm in ("baseline", "no_x")], str(root))[-1],
     ["--metric", "test_rmse"], r"metric 'test_rmse' has no value in any ok trial of "
                                r"trials\.parquet \(e\.g\. test_mae\)"),
    ("unknown URI scheme", lambda root: "nosuch://bucket/exp", [],
     r"nosuch://bucket/exp: cannot be read"),
    ("relative margin of a zero mean", lambda root: (_set_metric(root, "test_mae", 0.0, "baseline"),
                                                     str(root))[-1], [],
     r"margin '5%': a percentage is tested as a ratio to the reference's mean, here 0 "
     r"\(not above 0\): give the margin in the metric's units"),
]


@pytest.mark.parametrize(("case", "change", "extra", "error"), CASES,
                         ids=[case[0] for case in CASES])
def test_report_on_what_is_not_a_finished_experiment_is_one_line(experiment, tmp_path, capsys,
                                                                 case, change, extra, error):
    argument = change(_copy(experiment, tmp_path))
    before = _files(tmp_path)
    assert main(["report", argument, *extra]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_ablations.py report: error: "), lines
    assert re.search(error, lines[0]), lines[0]
    assert _files(tmp_path) == before  # nothing written


def test_report_on_a_file_uri_writes_every_file_in_place(experiment, tmp_path, capsys):
    """Through the URI's file system: each file written, a figure's earlier PDF removed
    (``--figures png``; writing them is test_report_readable's and test_s3's)."""
    root = _copy(experiment, tmp_path)
    uri = root.as_uri()  # file:///...
    (root / "report_files").mkdir()
    (root / "report_files" / "forest-column.pdf").write_bytes(b"an earlier report's")
    assert main(["report", uri, "--figures", "png"]) == 0
    out = capsys.readouterr().out
    assert f"Report: {uri}/report.md and {uri}/report.html" in out and "| no_x | 3 |" in out
    assert "## Ablation table" in (root / "report.md").read_text()
    assert (root / "report.html").read_text().count("src='data:image/png;base64,") == 4
    for name in ("forest", "learning_curves", "strata", "calibration"):
        assert (root / "report_files" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert not (root / "report_files" / "forest-column.pdf").exists()
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_the_figures_flag_offers_what_the_report_writes():
    from ablations.cli.commands import parser_of
    from ablations.results.report.plots import FIGURES

    action = next(a for a in parser_of("report")._actions if a.dest == "figures")
    assert tuple(action.choices) == FIGURES and action.default == "all"


@pytest.mark.parametrize(("flags", "error"), [
    (["--margin", "abc"], r"argument --margin: 'abc': give a positive number in the "
     r"metric's units \(0\.02\) or a percentage of the reference's mean \(5%\)"),
    (["--margin", "-1"], r"argument --margin: '-1': give a positive number"),
    (["--margin", "0%"], r"argument --margin: '0%': give a positive number"),
    (["--alpha", "0.5"], r"argument --alpha: '0\.5': must be a number in \(0, 0\.5\)"),
    (["--alpha", "x"], r"argument --alpha: 'x': must be a number in \(0, 0\.5\)"),
])
def test_a_bad_margin_or_alpha_is_one_line(experiment, tmp_path, capsys, flags, error):
    root = _copy(experiment, tmp_path)
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as exit_info:  # argparse's exit, code 2
        main(["report", str(root), *flags])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_ablations.py report: error: "), lines
    assert re.search(error, lines[0]), lines[0]
    assert _files(tmp_path) == before  # nothing written


@pytest.mark.parametrize(("flags", "verdict", "note"), [
    ([], "inconclusive", "margin ±5% of baseline's mean (1), tested as a ratio, alpha 0.05"),
    # the 90% interval of no_x - baseline (0.2 ± 0.17) lies inside ±0.5
    (["--margin", "0.5"], "equivalent", "margin ±0.5, alpha 0.05"),
    # paired p = 0.074 < 0.1: significant; its 80% interval reaches 0.31, beyond ±0.05
    (["--alpha", "0.1"], "worse",
     "margin ±5% of baseline's mean (1), tested as a ratio, alpha 0.1"),
])
def test_margin_and_alpha_flags_set_the_verdicts(experiment, tmp_path, capsys, flags, verdict,
                                                 note):
    root = _copy(experiment, tmp_path)
    assert main(["report", str(root), *flags, "--figures", "png"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| no_x |"))
    assert f"| {verdict} |" in row and note in out, out
    markdown = (root / "report.md").read_text()
    assert f"| {verdict} |" in markdown and note in markdown


def test_seeds_that_tie_are_flagged_without_a_verdict_or_a_warning(experiment, tmp_path,
                                                                   capsys):
    """A deterministic program's metric, one value on every seed of every arm: the report
    shows the difference, no verdict (no seed variance to test it against), says that the
    program ignores its seed and how to pass it, and raises no warning (scipy's t test warns
    that it lost precision on such data)."""
    root = _copy(experiment, tmp_path)
    trials = pd.read_parquet(root / "trials.parquet")
    trials["test_mae"] = trials["ablation"].map({"baseline": 1.0}).fillna(1.25)
    for column in [c for c in trials if c.startswith(("test_", "val_")) and c != "test_mae"]:
        if pd.api.types.is_numeric_dtype(trials[column]):
            trials[column] = trials["ablation"].map({"baseline": 0.5}).fillna(0.75)
    trials.to_parquet(root / "trials.parquet", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the report
        assert main(["report", str(root), "--figures", "png"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| no_x |"))
    assert "+0.250" in row and "| worse |" not in row and "inconclusive" in row, row
    assert "the program ignores the seed it is given" in out and "{seed}" in out, out
    assert "the program ignores the seed" in (root / "report.md").read_text()


def test_a_failed_report_write_keeps_the_previous_report_whole(experiment, tmp_path, capsys,
                                                               monkeypatch):
    import ablations.results.io.files

    root = _copy(experiment, tmp_path)
    assert main(["report", str(root), "--figures", "png"]) == 0
    previous = {name: (root / name).read_bytes() for name in _files(root)}

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ablations.results.io.files.os, "fsync", disk_full)
    capsys.readouterr()
    assert main(["report", str(root), "--figures", "png"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    assert {name: (root / name).read_bytes() for name in _files(root)} == previous


@pytest.mark.parametrize("name", ["../elsewhere", "a/b", "/abs", ".hidden", ""])
def test_resume_refuses_a_name_that_is_a_path(tmp_path, capsys, name):
    outside = tmp_path / "elsewhere"  # an experiment folder outside --storage: never reached
    outside.mkdir()
    (outside / "experiment.json").write_text("{}")
    assert main(["--resume", "--name", name, "--storage", str(tmp_path / "results")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"--name {name!r}: use letters, digits" in lines[0], lines
    assert not (tmp_path / "results").exists()



def _record(root: Path, **keys) -> None:
    (root / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                      "space": "components", "trials": {},
                                                      **keys}))


@pytest.mark.parametrize(("keys", "error"), [
    ({"metrics": "loss"}, r"'metrics' is text, not a mapping"),
    ({"metrics": {"test_mae": {"direction": "sideways", "unit": "km"}}},
     r"'metrics' entry 'test_mae' has direction 'sideways', not higher or lower"),
    ({"planned": {"metric": 3}}, r"'planned' metric is a number, not text"),
    ({"trials": []}, r"'trials' is a list, not a mapping"),
    ({"planned": {"metric": "score"}},
     r"'metrics' does not record the direction and unit of the experiment's metric 'score'"),
])
def test_report_and_resume_refuse_a_damaged_record_in_the_same_words(experiment, tmp_path,
                                                                     capsys, keys, error):
    root = _copy(experiment, tmp_path)
    _record(root, **keys)
    record = (root / "experiment.json").read_text()
    before = _files(tmp_path)
    said = []
    for argv in (["report", str(root)], ["run", "--resume", "--name", "exp", "--storage",
                                         str(tmp_path)]):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and re.search(error, lines[0]), lines
        assert "the experiment's record is damaged" in lines[0]
        said.append(lines[0].split("error: ", 1)[1])
    assert said[0] == said[1]  # one refusal, whoever reads the record
    assert _files(tmp_path) == before and (root / "experiment.json").read_text() == record


def test_a_run_of_the_reference_alone_is_reported_without_verdicts_and_says_so(
        experiment, tmp_path, capsys):
    root = _copy(experiment, tmp_path)
    trials = pd.read_parquet(root / "trials.parquet")
    trials[trials["ablation"] == "baseline"].to_parquet(root / "trials.parquet", index=False)
    assert main(["report", str(root), "--figures", "png"]) == 0
    said = "Only the reference baseline ran: there is no variant to compare with it, so no " \
           "verdict on test_mae"
    assert said in capsys.readouterr().out and said in (root / "report.md").read_text()


def test_a_fault_of_the_runners_is_not_shown_as_bad_input(experiment, tmp_path, capsys,
                                                          monkeypatch):
    import numpy as np

    from ablations.results.stats import verdicts

    root = _copy(experiment, tmp_path)

    def broken(*args, **kwargs):  # numpy's own ValueError, as a bug of the runner's meets it
        return np.zeros(0).reshape(0, -1)

    monkeypatch.setattr(verdicts, "family_contrasts", broken)
    with pytest.raises(ValueError, match="cannot reshape array of size 0"):
        main(["report", str(root)])
    assert "error:" not in capsys.readouterr().err


def test_a_unit_or_name_that_looks_like_html_stays_text_in_report_md(experiment, tmp_path,
                                                                     capsys):
    import markdown_it

    root = _copy(experiment, tmp_path)
    for table in ("trials", "epochs", "predictions"):
        frame = pd.read_parquet(root / f"{table}.parquet")
        frame["ablation"] = frame["ablation"].replace("no_x", "<script>alert(1)</script>|x")
        frame.to_parquet(root / f"{table}.parquet", index=False)
    _record(root, metrics={"test_mae": {"direction": "lower", "unit": "<b>km</b>"}})
    assert main(["report", str(root), "--figures", "png"]) == 0
    capsys.readouterr()
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(
        (root / "report.md").read_text())
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;|x" in html and "&lt;b&gt;km&lt;/b&gt;" in html


def test_compare_with_a_damaged_record_names_it(experiment, tmp_path, capsys):
    """A's experiment.json names its metric and units: damaged, the comparison is refused
    naming it, not run on another metric."""
    root = _copy(experiment, tmp_path)
    record = root / "experiment.json"
    record.write_text('{"schema_version": 1, "space": "components", "metri')  # cut short
    assert main(["compare", str(root), str(experiment)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_ablations.py compare: error: "), lines
    assert f"{record}: not valid JSON" in lines[0], lines[0]


def test_report_of_an_unfinished_experiment_in_its_own_folder_names_its_name_and_storage(
        experiment, tmp_path, capsys, monkeypatch):
    root = _copy(experiment, tmp_path)
    for name in ("trials.parquet", "epochs.parquet", "predictions.parquet"):
        (root / name).unlink()
    (root / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                      "space": "components"}))
    monkeypatch.chdir(root)
    assert main(["report", "."]) == 2
    line = capsys.readouterr().err.strip()
    assert line.endswith(f"--resume --name exp --storage {tmp_path.resolve()}"), line
