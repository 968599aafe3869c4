"""Config parsing: strict booleans, users' YAML keys, unknown keys, validation."""

from __future__ import annotations

import pytest

from ablations.config import (
    ConfigError,
    TrialConfig,
    apply_overrides,
    config_from_sources,
    parse_bool,
)


@pytest.mark.parametrize("text", ["true", "True", "TRUE", "1", "yes", "YES", "Yes", " yes "])
def test_parse_bool_true(text):
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["false", "False", "FALSE", "0", "no", "NO", "No"])
def test_parse_bool_false(text):
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["on", "off", "y", "n", "2", "", "truee", "none", "-1"])
def test_parse_bool_refuses_everything_else(text):
    with pytest.raises(ConfigError, match="not a boolean"):
        parse_bool(text, name="flag")


def test_string_false_is_false_not_true():
    # The old argparse type=bool bug: bool("False") is True.
    config = apply_overrides(TrialConfig(), {"gradient_checkpointing": "False"}, source="t")
    assert config.systems.gradient_checkpointing is False
    config = apply_overrides(TrialConfig(), {"use_scalars": "no"}, source="t")
    assert config.data.use_scalars is False


def test_users_yaml_keys(tmp_path):
    path = tmp_path / "user.yaml"
    path.write_text(
        "memory_optimized: true\n"
        "gradient_checkpointing: False\n"
        "torch_compile: yes\n"
        "torch_compile_mode: max-autotune-no-cudagraphs\n"
        "batch_size: 20\n"
        "temporal_frames: 5\n"
        "epochs: 7\n"
        "learning_rate: 0.0005\n"
    )
    config = config_from_sources(yaml_path=path)
    assert config.model.cnn_widths == "32,64,128"
    assert config.systems.gradient_checkpointing is False
    assert config.systems.compile == "max-autotune-no-cudagraphs"
    assert (config.optim.batch_size, config.data.temporal_frames, config.optim.epochs) == (20, 5, 7)
    assert config.optim.lr == pytest.approx(5e-4)


def test_torch_compile_true_without_mode_means_default_and_false_wins(tmp_path):
    on = apply_overrides(TrialConfig(), {"torch_compile": "true"}, source="t")
    assert on.systems.compile == "default"
    off = apply_overrides(
        TrialConfig(), {"torch_compile": "false", "torch_compile_mode": "default"}, source="t"
    )
    assert off.systems.compile == "off"


def test_yaml_on_is_refused(tmp_path):
    # PyYAML would read `on` as True; the strict parser refuses it.
    path = tmp_path / "c.yaml"
    path.write_text("gradient_checkpointing: on\n")
    with pytest.raises(ConfigError, match="gradient_checkpointing.*not a boolean"):
        config_from_sources(yaml_path=path)


def test_unknown_key_is_refused_with_a_suggestion(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batchsize: 16\n")
    with pytest.raises(ConfigError, match="unknown key 'batchsize'; did you mean 'batch_size'"):
        config_from_sources(yaml_path=path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"epochs": "0"}, "epochs must be >= 1"),
        ({"batch_size": "abc"}, "not an integer"),
        ({"lr": "-1"}, "lr must be > 0"),
        ({"lr": "nan"}, "not a finite number"),
        ({"head": "laplace"}, "head.*not one of"),
        ({"compile": "fast"}, "compile.*not one of"),
        ({"cnn_widths": "64,128"}, "three"),
        ({"use_images": "false", "use_scalars": "false"}, "no input"),
        ({"embed_dim": "10", "num_heads": "4"}, "divisible"),
        ({"batch_size": "20", "grad_accum_steps": "3"}, "divisible by grad_accum_steps"),
        ({"precision": "fp8"}, "precision.*not one of"),
    ],
)
def test_bad_values_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(TrialConfig(), overrides, source="t")


def test_yaml_must_be_a_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        config_from_sources(yaml_path=path)


def test_round_trip_through_dict():
    config = TrialConfig.of(seed=3, cnn_widths="32/64/128", head="point")
    assert config.model.cnn_widths == "32,64,128" and config.model.widths == (32, 64, 128)
    again = TrialConfig.from_dict(config.to_dict())
    assert again == config


def test_only_without_the_reference_adds_it_and_says_so():
    """``--only no_images``: the reference joins the plan (every verdict compares with it) and
    one planning note says so; with the reference named, no note."""
    from ablations.config.values import flag_of, named
    from ablations import Experiment, Seeds
    from ablations.experiment.prepare import prepare

    prepared = prepare(Experiment("components", seeds=2, only=["no_images"]).request)
    assert {t.variant for t in prepared.trials} == {"baseline", "no_images"}
    # the library names the argument, the command line its flag
    assert [named(n) for n in prepared.notes] == [
        "only: added the reference 'baseline', which every variant's verdict is compared with"]
    assert named(prepared.notes[0], flag_of).startswith("--only: added the reference")
    named = prepare(Experiment("components", seeds=2, only=["baseline", "no_images"]).request)
    assert not [n for n in named.notes if n.startswith("--only")]
    control = prepare(Experiment("components", seeds=Seeds(2, null_control=True),
                                 only=["no_images"]).request)
    assert {t.variant for t in control.trials} == {"baseline", "baseline_repeat", "no_images"}


@pytest.mark.parametrize("key", ["inject_oom_above_batch", "inject_failure_at_epoch",
                                 "compile_backend", "faults.oom_above_batch", "fail_at_epoch"])
def test_the_tests_fault_injection_is_no_config_key(key):
    """Faults reach the built-in loop only through its hooks (LoopHooks, ablations/trial/step.py),
    which the tests' training function (tests/faulty.py) sets from keys of its own."""
    with pytest.raises(ConfigError, match="unknown key"):
        TrialConfig.of(**{key: 1})
    assert not any(key.rpartition(".")[2] in name for name in TrialConfig().flat())
