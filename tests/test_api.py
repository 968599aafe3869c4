"""The library API (ablations/experiment/api.py): ``Experiment.plan()`` validates like the command
line and starts nothing; ``Experiment.run()`` owns Ray's start and shutdown and returns the tables
with the verdicts."""

from __future__ import annotations


import re

import pytest

from ablations import Decision, Experiment, Resources, Rounds, Seeds
from ablations.config import ConfigError
from ablations.experiment.core.request import UsageError
from tests.conftest import REPO

TINY = {"epochs": 2, "synthetic_train": 64, "synthetic_val": 16, "synthetic_test": 32,
        "cnn_widths": "8,16,16", "embed_dim": 16, "num_heads": 2, "batch_size": 16}


def test_plan_validates_and_starts_nothing(tmp_path):
    import ray

    trials = Experiment("components", seeds=2, only=["baseline", "no_images"], overrides=TINY,
                        storage=tmp_path).plan()
    assert [t.name for t in trials] == ["baseline-seed0", "baseline-seed1", "no_images-seed0",
                                        "no_images-seed1"]
    assert trials[2].config.data.use_images is False and trials[0].config.optim.epochs == 2
    assert not ray.is_initialized() and not any(tmp_path.iterdir())


def test_plan_of_a_space_file_with_a_plugin_and_seeds_auto():
    trials = Experiment(str(REPO / "examples" / "conv3d_ablations.yaml"),
                        seeds=Seeds("auto"), design=Rounds(max_seeds=6)).plan()
    assert {t.seed for t in trials} == {0, 1, 2}  # the pilot
    shallow = next(t for t in trials if t.variant == "shallow")
    assert shallow.config.plugin == "examples.conv3d:PLUGIN" and shallow.config.model.depth == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"overrides": {"epoch": 2}}, ConfigError, "unknown key 'epoch'; did you mean 'epochs'"),
        ({"only": ["no_such"]}, ConfigError, "unknown variant"),
        ({"seeds": "auto", "design": Rounds(pilot=4, max_seeds=3)}, UsageError,
         "below the pilot's"),
    ],
)
def test_plan_raises_the_command_lines_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Experiment("components", **kwargs).plan()


@pytest.mark.slow
@pytest.mark.own_ray
def test_run_returns_the_tables_and_resume_continues_it_into_rounds(tmp_path, capfd):
    """own_ray: ``Experiment.run()`` starts Ray and stops it, which the test checks. Without a
    listener it writes nothing to stdout or stderr (its progress and its warning, the reference
    added to ``only``, are events), Ray's start and stop included."""
    import ray

    from ablations.results.io.files import read_metadata

    assert not ray.is_initialized()
    capfd.readouterr()
    result = Experiment("components", seeds=2, design=Rounds(max_seeds=3), only=["no_images"],
                        overrides=TINY, storage=tmp_path, name="api", progress=True,
                        resources=Resources(num_cpus=1)).run()
    assert capfd.readouterr() == ("", "")
    assert not ray.is_initialized()
    assert (result.trials["status"] == "ok").all() and len(result.trials) == 4
    assert result.directory == str(tmp_path / "api")
    assert set(result.verdicts["ablation"]) == {"baseline", "no_images"}
    assert result.verdicts.attrs["pilot"]  # the pilot look of the planned 2-to-3-seed design
    assert (tmp_path / "api" / "trials.parquet").is_file()
    # another plan under the same name: refused, nothing overwritten
    with pytest.raises(UsageError, match="holds a different experiment"):
        Experiment("components", seeds=2, only=["baseline"], overrides=TINY, storage=tmp_path,
                   name="api").run()
    with pytest.raises(UsageError, match="^metric test_rmse: api planned its rounds"):
        Experiment.resume("api", storage=tmp_path, seeds="auto",
                          decision=Decision(metric="test_rmse"))
    # nothing left to run: the same trials, and the same verdicts
    again = Experiment.resume("api", storage=tmp_path, resources=Resources(num_cpus=1))
    assert not ray.is_initialized()
    assert again.trials["trial_name"].tolist() == result.trials["trial_name"].tolist()
    assert again.verdicts["verdict"].tolist() == result.verdicts["verdict"].tolist()
    continued = Experiment.resume(storage=tmp_path, seeds="auto",  # the latest
                                  resources=Resources(num_cpus=1))
    record = read_metadata(str(tmp_path / "api"))["rounds"]
    assert record["continued"]["seeds"] == [0, 1] and record["design"]["looks"] == [2, 3]
    assert "decided_at" in continued.verdicts
    undecided = set(result.verdicts.loc[result.verdicts["verdict"] == "inconclusive",
                                        "ablation"])
    third = set(continued.trials.loc[continued.trials["seed"] == 2, "ablation"])
    assert third == (undecided | {"baseline"} if undecided else set())


def test_resume_names_its_arguments_when_there_is_nothing_to_resume(tmp_path):
    with pytest.raises(UsageError, match="^resume: no experiment in .*; pass name or storage$"):
        Experiment.resume(storage=tmp_path)


def test_the_request_has_the_command_lines_defaults_and_knows_what_was_given():
    from ablations.cli.commands import parser_of
    from ablations.cli.requests import request_from
    from ablations.experiment.core.request import Request

    run = parser_of("run")
    assert request_from(run.parse_args([])) == Request()
    # a flag given at its default value is given; an unambiguous prefix is argparse's too
    argv = ["--metric", "test_mae", "--max-se", "6", "--only", "baseline, no_images"]
    request = request_from(run.parse_args(argv))
    assert request.given == {"metric", "design", "max_seeds", "only"}
    assert request.only == ["baseline", "no_images"] and request.design == Rounds(max_seeds=6)


def test_the_library_names_arguments_and_the_command_line_names_flags():
    from ablations.cli.console import error_text

    with pytest.raises(UsageError) as caught:
        Experiment("components", seeds="auto", design=Rounds(pilot=4, max_seeds=3)).plan()
    assert str(caught.value) == ("max_seeds 3 is below the pilot's 4 seeds; raise max_seeds "
                                 "or lower pilot")
    assert error_text(caught.value) == ("--max-seeds 3 is below the pilot's 4 seeds; raise "
                                        "--max-seeds or lower --pilot")


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"decision": Decision(metric="nope")}, "metric: 'nope' is not a metric column"),
    ({"decision": Decision(alpha=0.9)}, "alpha: 0.9: must be a number in"),
    ({"decision": Decision(margin="abc")}, "margin: "),
    ({"seeds": "auto", "design": Rounds(pilot=1)}, "pilot: 1 must be an integer >= 2"),
    ({"resources": Resources(cpus_per_trial=-1)}, "cpus_per_trial: -1 must be a finite number"),
])
def test_the_library_checks_the_values_the_flags_check(kwargs, pattern):
    with pytest.raises(UsageError, match=re.escape(pattern)):
        Experiment("components", only=["baseline", "no_images"], **kwargs).plan()
