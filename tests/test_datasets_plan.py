"""Planning an experiment over several datasets (docs/datasets.md): the datasets a request or a
space file names, the table expanded on each with its name, and what does not combine with
them, refused before anything runs."""

from __future__ import annotations

import argparse

import pytest

from ablations.experiment.core.design_options import Factorial, Rounds
from ablations.cli.flags import add_run_flags
from ablations.cli.requests import request_from
from ablations.experiment.prepare import prepare
from ablations.experiment.core.request import Request, UsageError
from tests.conftest import write_data_dir

SMALL = [("epochs", 1), ("max_train_examples", 32), ("max_eval_examples", 16), ("batch_size", 8)]


def plan(**fields):
    return prepare(Request(space="components", only=["no_images"], seeds=[0, 1],
                           overrides=list(SMALL), **fields))


def test_the_table_runs_on_each_dataset_with_its_name(tmp_path):
    data = write_data_dir(tmp_path / "site_a", frames=4)
    prepared = plan(datasets=["synthetic", str(data)])
    assert prepared.datasets == ["synthetic", "site_a"]
    names = [spec.name for spec in prepared.trials]
    assert names == ["synthetic.baseline-seed0", "synthetic.baseline-seed1",
                     "synthetic.no_images-seed0", "synthetic.no_images-seed1",
                     "site_a.baseline-seed0", "site_a.baseline-seed1",
                     "site_a.no_images-seed0", "site_a.no_images-seed1"]
    by_dataset = {spec.config.dataset: spec.config.data.data_dir for spec in prepared.trials}
    assert by_dataset == {"synthetic": "", "site_a": str(data.resolve())}
    # seeds pair within a dataset: the same seeds on each
    assert {s.seed for s in prepared.trials if s.config.dataset == "site_a"} == {0, 1}
    assert prepared.design.continues_into_rounds is False  # no rounds across datasets
    assert "design" not in prepared.design.planned  # each dataset's verdicts at full alpha


def test_one_dataset_keeps_the_trial_names_and_names_its_dataset(tmp_path):
    prepared = plan()
    assert [s.name for s in prepared.trials][:2] == ["baseline-seed0", "baseline-seed1"]
    assert {s.config.dataset for s in prepared.trials} == {"synthetic"}
    data = write_data_dir(tmp_path / "coast", frames=4)
    prepared = plan(data=str(data))
    assert {s.config.dataset for s in prepared.trials} == {"coast"}


def test_a_named_dataset_and_a_mapping_of_keys(tmp_path):
    data = write_data_dir(tmp_path / "x", frames=4)
    prepared = plan(datasets={"north": str(data), "small": {"max_train_examples": 20}})
    configs = {s.config.dataset: s.config for s in prepared.trials}
    assert configs["north"].data.data_dir == str(data.resolve())
    assert configs["small"].data.max_train_examples == 20
    assert configs["north"].data.max_train_examples == 32


def test_a_space_file_names_its_datasets_relative_to_itself(tmp_path):
    write_data_dir(tmp_path / "data" / "east", frames=4)
    space = tmp_path / "space.yaml"
    space.write_text("variants:\n  baseline: {}\n  no_images: {use_images: false}\n"
                     "datasets:\n  synthetic: synthetic\n  east: data/east\n")
    prepared = prepare(Request(space=str(space), seeds=[0, 1], overrides=list(SMALL)))
    dirs = {s.config.dataset: s.config.data.data_dir for s in prepared.trials}
    assert dirs == {"synthetic": "", "east": str((tmp_path / "data" / "east").resolve())}


def test_repeated_data_flags_are_the_datasets():
    parser = argparse.ArgumentParser()
    add_run_flags(parser)
    argv = ["--data", "synthetic", "--data", "b=/tmp/b"]
    request = request_from(parser.parse_args(argv))
    assert request.datasets == ["synthetic", "b=/tmp/b"] and request.data is None
    assert "datasets" in request.given
    argv = ["--data", "/tmp/one"]
    request = request_from(parser.parse_args(argv))
    assert request.data == "/tmp/one" and request.datasets is None


@pytest.mark.parametrize("fields, says", [
    ({"seeds": "auto"}, "--seeds auto with several datasets"),
    ({"margin": "0.02"}, "give a percentage"),
    ({"design": Rounds(max_seeds=8)}, "max_seeds"),
    ({"design": Factorial(factors=["use_images"])}, "factorial"),
    ({"cross_seeds": True}, "cross_seeds"),
    ({"auto_batch": True}, "auto_batch"),
])
def test_what_does_not_combine_with_several_datasets_is_refused(fields, says):
    base = {"space": "components", "seeds": [0, 1], "overrides": list(SMALL),
            "datasets": ["synthetic", "b={}".format("synthetic")]}
    base.update(fields)
    with pytest.raises(UsageError) as error:
        prepare(Request(**base))
    assert says.replace("--", "").split()[0] in str(error.value)


@pytest.mark.parametrize("datasets, says", [
    (["synthetic", "synthetic"], "given twice"),
    (["a.b=synthetic", "synthetic"], "not a dataset name"),
    ([], "no dataset given"),
])
def test_bad_dataset_names_are_refused(datasets, says):
    with pytest.raises(UsageError, match=says):
        plan(datasets=datasets)


def test_data_beside_datasets_is_refused():
    with pytest.raises(UsageError, match="give the datasets once"):
        plan(data="/tmp", datasets=["synthetic", "b=synthetic"])


def test_the_dataset_is_named_by_the_runner_not_by_a_key(tmp_path):
    with pytest.raises(UsageError, match="not a key to set"):
        prepare(Request(space="components", seeds=[0, 1],
                        overrides=[*SMALL, ("dataset", "other")]))
    space = tmp_path / "space.yaml"
    space.write_text("variants:\n  baseline: {}\n  other: {dataset: other}\n")
    with pytest.raises(UsageError, match="variant other sets dataset='other'"):
        prepare(Request(space=str(space), seeds=[0, 1], overrides=list(SMALL)))
    with pytest.raises(UsageError, match="not a key to set"):
        plan(datasets={"a": {"dataset": "b"}, "b": {}})


def test_a_string_of_datasets_is_refused_in_one_line():
    with pytest.raises(UsageError, match="give a list"):
        plan(datasets="synthetic")


def test_own_code_datasets_are_its_keys_not_directories(tmp_path):
    data = write_data_dir(tmp_path / "d", frames=4)
    with pytest.raises(UsageError, match="own code reads its own data"):
        prepare(Request(space="examples/digits/ablations.yaml", seeds=[0, 1],
                        datasets=["synthetic", str(data)]))
    prepared = prepare(Request(space="examples/digits/datasets.yaml", seeds=[0, 1]))
    configs = {s.config.dataset: s.config.model for s in prepared.trials}
    assert configs["digits_quarter"].train_share == 0.25
    assert configs["digits_noisy"].pixel_noise == 0.3 and configs["digits"].pixel_noise == 0
