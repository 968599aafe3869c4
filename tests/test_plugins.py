"""Your own model as a plugin, your own ablation table as a file (docs/plugins.md): the plugin
is loaded and its switches are config keys like the runner's (parsed, validated, did-you-mean);
the runner's gradient checkpointing and channels_last apply to it; a space file is validated
before any trial starts; and examples/conv3d.py runs its own ablation file end to end, on the
synthetic data and on a file dataset, with verdicts, Parquet and the report."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from ablations.config import ConfigError, TrialConfig, apply_overrides
from ablations.trial.model_builder import build_trial_model
from ablations.config.plugins import ModelPlugin, PluginError, load_plugin
from tests.conftest import REPO, run_here, write_data_dir
from tests.test_cli import assert_one_line_error, in_process

CONV3D = "examples.conv3d:PLUGIN"
EXAMPLE_SPACE = str(REPO / "examples" / "conv3d_ablations.yaml")
TINY = ["--epochs", "2", "--set", "synthetic_train=64", "--set", "synthetic_val=16",
        "--set", "synthetic_test=32", "--set", "batch_size=16", "--set", "width=4",
        "--no-dashboard"]


@pytest.fixture
def fake_module(monkeypatch):
    """A plugin module registered in sys.modules under ``fake_plugins``."""
    module = types.ModuleType("fake_plugins")
    monkeypatch.setitem(sys.modules, "fake_plugins", module)
    return module


# ------------------------------------------------------------------------------ loading


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("examples.conv3d", "give package.module:NAME"),
        ("no_such_package.model:PLUGIN", "cannot import no_such_package.model"),
        ("examples.conv3d:NOPE", "examples.conv3d has no 'NOPE'"),
        ("examples.conv3d:Conv3dConfig", "is not an ablations.config.plugins.ModelPlugin"),
    ],
)
def test_a_plugin_that_cannot_load_is_one_line(spec, pattern):
    with pytest.raises(PluginError, match=pattern):
        load_plugin(spec)


def test_a_plugin_key_that_is_also_a_runner_key_is_refused(fake_module):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Clash:
        epochs: int = 3

    fake_module.CLASH = ModelPlugin("clash", Clash, build=lambda config, shape: None)
    with pytest.raises(PluginError, match="'epochs' is also the runner's"):
        TrialConfig.of(model="fake_plugins:CLASH")
    with pytest.raises(PluginError, match="'epochs' is also the runner's"):  # every time
        TrialConfig().replace(model="fake_plugins:CLASH")


# ------------------------------------------------------------------------------ config keys


def test_plugin_switches_are_config_keys_of_the_model_section():
    config = apply_overrides(TrialConfig(), {"model": CONV3D, "depth": "1", "epochs": "2"},
                             source="test")
    assert config.plugin == CONV3D and config.optim.epochs == 2
    assert type(config.model).__name__ == "Conv3dConfig" and config.model.depth == 1
    # parsed as the runner's own keys: a boolean string, an int
    config = config.replace(variance_head="false", depth=3)
    assert (config.model.variance_head, config.model.depth) == (False, 3)
    assert config.flat()["model"] == CONV3D and config.flat()["variance_head"] is False
    assert TrialConfig.from_dict(config.to_dict()) == config
    # nested keys name the section; a new model starts from its own defaults
    assert config.replace(**{"model.depth": 2}).model.depth == 2
    assert apply_overrides(config, {"model": {"width": 8}}, source="t").model.width == 8
    builtin = config.replace(model="multimodal")
    assert builtin.plugin == "" and builtin.model == TrialConfig().model
    assert builtin.optim.epochs == 2  # the runner's keys stay


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"dept": "1"}, "unknown key 'dept'; did you mean 'depth'?"),
        ({"depth": "9"}, "model conv3d: depth must be in 1..4, got 9"),
        ({"depth": "two"}, "depth='two' is not an integer, as its default"),
        ({"variance_head": "on"}, "variance_head"),
    ],
)
def test_bad_plugin_values_are_refused_naming_the_key(changes, pattern):
    base = apply_overrides(TrialConfig(), {"model": CONV3D}, source="test")
    with pytest.raises(ConfigError, match=pattern):
        apply_overrides(base, changes, source="test")


def test_plugin_keys_without_the_plugin_are_unknown():
    with pytest.raises(ConfigError, match="unknown key 'depth'"):
        apply_overrides(TrialConfig(), {"depth": "1"}, source="test")
    with pytest.raises(ConfigError, match="unknown key 'model.depth'"):
        TrialConfig.of(**{"model.depth": 1})


# ------------------------------------------------------------------------------ the model


def _batch(config: TrialConfig, shape=(2, 8, 8), scalars=3):
    torch.manual_seed(0)
    frames = torch.randn(4, config.data.temporal_frames, *shape)
    return frames, torch.randn(4, scalars), torch.randn(4)


def test_gradient_checkpointing_wraps_the_plugins_blocks_with_the_same_gradients():
    base = apply_overrides(TrialConfig(), {"model": CONV3D, "width": "4"}, source="test")
    grads = {}
    for checkpointing in (False, True):
        config = base.replace(gradient_checkpointing=checkpointing)
        torch.manual_seed(1)
        model = build_trial_model(config, (2, 8, 8), 3)
        frames, scalars, target = _batch(config)
        mean, variance = model(frames, scalars)
        (0.5 * (variance.log() + (target - mean) ** 2 / variance)).mean().backward()
        grads[checkpointing] = [p.grad.clone() for p in model.parameters()]
        wrapped = [n for n, m in model.named_modules() if type(m).__name__ == "Checkpointed"]
        assert wrapped == (["blocks.0", "blocks.1", "blocks.2"] if checkpointing else [])
    for a, b in zip(grads[False], grads[True]):
        torch.testing.assert_close(a, b)


def test_a_plugin_without_blocks_refuses_gradient_checkpointing(fake_module):
    from examples.conv3d import Conv3dConfig, Conv3dRegressor

    fake_module.PLUGIN = ModelPlugin("bare", Conv3dConfig, build=Conv3dRegressor)
    config = TrialConfig.of(model="fake_plugins:PLUGIN", gradient_checkpointing=True)
    with pytest.raises(ConfigError, match="model bare exposes no blocks to checkpoint"):
        build_trial_model(config, (2, 8, 8), 3)


def test_channels_last_reaches_the_plugins_3d_convolutions():
    config = apply_overrides(TrialConfig(), {"model": CONV3D, "width": "4",
                                             "channels_last": "true"}, source="test")
    model = build_trial_model(config, (2, 8, 8), 3)
    weights = [p for p in model.parameters() if p.dim() == 5]
    assert weights and all(p.is_contiguous(memory_format=torch.channels_last_3d)
                           for p in weights)
    frames, scalars, _ = _batch(config)
    assert model(frames, scalars)[0].shape == (4,)


def test_the_plugin_trains_an_epoch_with_channels_last():
    # Module.to(memory_format=torch.channels_last) on a model with Conv3d weights fails
    # ("required rank 4 tensor to use channels_last format"): the trial converts per rank
    from ablations.trial.loop import train

    config = TrialConfig.of(model=CONV3D, width=4, depth=1, epochs=1, batch_size=16,
                            synthetic_train=64, synthetic_val=16, synthetic_test=16,
                            eval_batch_size=64, channels_last=True)
    states = []
    outcome = train(config, report=lambda metrics, state, predictions: states.append(state))
    assert outcome.status == "ok" and outcome.metrics["epochs_run"] == 1
    assert outcome.predictions is not None and len(outcome.predictions) == 16
    weights = [t for t in states[-1]["model"].values() if t.dim() == 5]  # the trained weights
    assert weights and all(t.is_contiguous(memory_format=torch.channels_last_3d)
                           for t in weights)


# ------------------------------------------------------------------------------ space files


def _space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "table.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("variants: [a, b]\n", "'variants' must be a non-empty mapping"),
        ("variants:\n  baseline: {}\nreferense: baseline\n", "unknown top-level key 'referense'"),
        ("variants:\n  full: {}\n", "reference 'baseline' is not among the variants (full)"),
        ("variants:\n  baseline: {}\n  x: 3\n", "variant 'x' must be a mapping"),
        ("variants: {baseline: {}\n", "not valid YAML at line"),
        ("variants:\n  baseline: {}\n  small: {cnn_widht: '8,16,16'}\n",
         "variant small: unknown key 'cnn_widht'; did you mean 'cnn_widths'?"),
    ],
)
def test_a_bad_space_file_is_one_line_before_any_trial(capsys, tmp_path, text, pattern):
    path = _space(tmp_path, text)
    code, _, err = in_process(capsys, "--space", path, "--dry-run")
    assert_one_line_error(code, err, pattern)
    if "variant small" in pattern:  # the file is named
        assert path in err


def test_a_space_file_for_another_model_than_model_is_refused(capsys):
    code, _, err = in_process(capsys, "--space", EXAMPLE_SPACE, "--model", "examples.x:Y",
                              "--dry-run")
    assert_one_line_error(code, err, "is about examples.conv3d:PLUGIN; drop one of the two")


def test_the_example_space_dry_run_resolves_the_plugins_switches(capsys):
    code, out, _ = in_process(capsys, "--space", EXAMPLE_SPACE, "--seeds", "1", "--dry-run")
    assert code == 0, out
    for variant in ("baseline", "no_temporal_kernel", "shallow", "point_head"):
        assert f"{variant}-seed0" in out
    assert "temporal_kernel" in out and "depth" in out


# ------------------------------------------------------------------------------ end to end


@pytest.mark.slow
@pytest.mark.parametrize("data", ["synthetic", "file"])
def test_the_example_model_runs_its_ablation_file_end_to_end(tmp_path, data):
    """`--model examples.conv3d:PLUGIN --space examples/conv3d_ablations.yaml`: every trial ok,
    the verdict table printed, the plugin and its switches in trials.parquet, the report."""
    from ablations.results.report.build import write_report

    extra = []
    if data == "file":
        extra = ["--data", str(write_data_dir(tmp_path / "data", n=80, frames=4))]
    done = run_here("--model", CONV3D, "--space", EXAMPLE_SPACE, "--seeds", "2", *TINY, *extra,
                    "--storage", str(tmp_path / "results"), "--name", "conv3d")
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "verdict" in out and "Verdicts on test_mae" in out
    root = tmp_path / "results" / "conv3d"
    trials = pd.read_parquet(root / "trials.parquet")
    assert (trials["status"] == "ok").all(), trials[["trial_name", "error"]]
    assert set(trials["model"]) == {CONV3D}
    switches = trials.drop_duplicates("ablation").set_index("ablation")
    assert switches.loc["shallow", ["depth", "width", "temporal_kernel"]].tolist() == [1, 4, 3]
    assert switches.loc["no_temporal_kernel", ["depth", "width", "temporal_kernel"]].tolist() \
        == [3, 4, 1]
    assert "cnn_widths" not in trials
    point = trials[trials["ablation"] == "point_head"]
    assert point["test_nll"].isna().all() and trials.loc[
        trials["ablation"] == "baseline", "test_nll"].notna().all()
    meta = json.loads((root / "experiment.json").read_text())
    assert meta["space"] == "conv3d" and meta["reference"] == "baseline"
    report = write_report(root, figures="png")
    assert set(report.ablation["ablation"]) == {"baseline", "no_temporal_kernel", "shallow",
                                                "point_head"}


@pytest.mark.parametrize("source, words", [
    ("raise RuntimeError('boom')\n", "importing broken_at_import failed: RuntimeError: boom ("),
    ("def f(:\n", "importing broken_at_import failed: SyntaxError: invalid syntax ("),
    ("import nosuchpackage_xyz\n", "cannot import broken_at_import (No module named "
                                   "'nosuchpackage_xyz')"),
])
def test_a_module_that_fails_at_import_is_one_line_naming_its_file(tmp_path, monkeypatch,
                                                                    source, words):
    from ablations.config.plugins import PluginError, load_plugin

    (tmp_path / "broken_at_import.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as caught:
        load_plugin("broken_at_import:F")
    message = str(caught.value)
    assert words in message and "\n" not in message, message
    if "failed" in words:
        assert f"{tmp_path / 'broken_at_import.py'}, line 1)" in message


@pytest.mark.parametrize("spec", ["../../etc/passwd:F", ".relative:F", "a b:F", "mod:",
                                  "mod:not a name", ":F"])
def test_a_model_that_is_not_a_module_name_is_refused_before_any_import(spec):
    from ablations.config.plugins import PluginError, load_plugin

    with pytest.raises(PluginError, match="give package.module:NAME"):
        load_plugin(spec)
