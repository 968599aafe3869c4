"""The library API (ablations/experiment/api.py): ``Experiment.plan()`` validates like the command
line and starts nothing; ``Experiment.run()`` owns Ray's start and shutdown and returns the tables
with the verdicts."""

from __future__ import annotations


import re

import pytest

from ablations.experiment.api import Experiment
from ablations.config import ConfigError
from ablations.experiment.request import UsageError
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
    trials = Experiment(str(REPO / "examples" / "conv3d_ablations.yaml"), seeds="auto",
                        max_seeds=6).plan()
    assert {t.seed for t in trials} == {0, 1, 2}  # the pilot
    shallow = next(t for t in trials if t.variant == "shallow")
    assert shallow.config.plugin == "examples.conv3d:PLUGIN" and shallow.config.model.depth == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"overrides": {"epoch": 2}}, ConfigError, "unknown key 'epoch'; did you mean 'epochs'"),
        ({"only": ["no_such"]}, ConfigError, "unknown variant"),
        ({"seeds": "auto", "pilot": 4, "max_seeds": 3}, UsageError, "below the pilot's"),
    ],
)
def test_plan_raises_the_command_lines_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Experiment("components", **kwargs).plan()


@pytest.mark.slow
def test_run_returns_the_tables_and_shuts_down_the_ray_it_started(tmp_path):
    import ray

    assert not ray.is_initialized()
    result = Experiment("components", seeds=2, only=["baseline", "no_images"], overrides=TINY,
                        storage=tmp_path, name="api", num_cpus=2).run()
    assert not ray.is_initialized()
    assert (result.trials["status"] == "ok").all() and len(result.trials) == 4
    assert result.directory == str(tmp_path / "api")
    assert set(result.verdicts["ablation"]) == {"baseline", "no_images"}
    assert (tmp_path / "api" / "trials.parquet").is_file()
    with pytest.raises(UsageError, match="already exists"):  # nothing is overwritten
        Experiment("components", seeds=2, only=["baseline"], overrides=TINY, storage=tmp_path,
                   name="api").run()


def test_the_request_has_the_command_lines_defaults():
    from ablations.cli.flags import build_parser
    from ablations.experiment.request import Request

    # continuing.py tells a given flag from a default by comparing with Request()
    assert Request.of(build_parser().parse_args([])) == Request()


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"metric": "nope"}, "--metric: 'nope' is not a metric column"),
    ({"alpha": 0.9}, "--alpha: 0.9: must be a number in"),
    ({"margin": "abc"}, "--margin: "),
    ({"seeds": "auto", "pilot": 1}, "--pilot: 1 must be an integer >= 2"),
    ({"cpus_per_trial": -1}, "--cpus-per-trial: -1 must be a finite number"),
])
def test_the_library_checks_the_values_the_flags_check(kwargs, pattern):
    with pytest.raises(UsageError, match=re.escape(pattern)):
        Experiment("components", only=["baseline", "no_images"], **kwargs).plan()
