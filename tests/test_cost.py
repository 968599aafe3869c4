"""Longest-first ordering of trials by estimated training FLOPs."""

from __future__ import annotations

import math

import pytest

from ablations.config import TrialConfig
from ablations.trial.cost import estimated_cost, longest_first
from ablations.search_spaces import expand, get_space


def test_flops_follow_the_model():
    base = estimated_cost(TrialConfig())
    # one frame of four: the CNN and spatial attention run a quarter as often
    assert 3.0 < base / estimated_cost(TrialConfig.of(temporal_frames=1)) < 4.5
    # half the CNN width: about a quarter of the convolution FLOPs
    assert 1.5 < base / estimated_cost(TrialConfig.of(cnn_widths="32,64,128")) < 4.0
    assert estimated_cost(TrialConfig.of(use_images=False)) < base / 100
    assert estimated_cost(TrialConfig.of(epochs=8)) == pytest.approx(2 * base)
    assert estimated_cost(TrialConfig.of(max_train_examples=640)) == pytest.approx(base / 2)


def test_components_start_longest_first_and_seeds_keep_their_order():
    trials = expand(get_space("components"), TrialConfig(), [0, 1])
    names = [trials[i].name for i in longest_first([t.config for t in trials])]
    assert names[:2] == ["baseline-seed0", "baseline-seed1"]  # ties keep table order
    assert names[-2:] == ["no_images-seed0", "no_images-seed1"]
    assert names.index("single_frame-seed0") > names.index("reduced_width-seed1")
    assert sorted(names) == sorted(t.name for t in trials)


def test_trials_without_an_estimate_go_last_in_their_order(tmp_path):
    missing = TrialConfig.of(data_dir=str(tmp_path / "only-on-the-cluster"))
    assert math.isnan(estimated_cost(missing))
    configs = [missing, TrialConfig.of(temporal_frames=1), missing.replace(seed=1), TrialConfig()]
    assert longest_first(configs) == [3, 1, 0, 2]


def test_a_count_is_kept_and_read_back_and_a_changed_model_is_counted_again(tmp_path,
                                                                           monkeypatch):
    """Counted once, a model's FLOPs are kept in the cache folder: a later process (the
    in-process cache cleared, the counting made to fail) reads the same number; another
    configuration, or an edited built-in model (its source's digest), is counted again."""
    from ablations.model.model import ModelConfig
    from ablations.trial import cost

    monkeypatch.setenv("ABLATION_CACHE_DIR", str(tmp_path))
    config = ModelConfig(in_channels=3, image_height=32, image_width=32, num_scalars=4,
                         cnn_widths="8,16,16", embed_dim=16, num_heads=2)
    cost.training_flops_per_sample.cache_clear()
    counted = cost.training_flops_per_sample(config)
    assert counted == cost.counted_flops_per_sample(config) > 0
    assert len(list(tmp_path.glob("flops-*.json"))) == 1
    cost.training_flops_per_sample.cache_clear()

    def no_count(model_config):
        raise AssertionError("counted again instead of read from the cache folder")

    monkeypatch.setattr(cost, "counted_flops_per_sample", no_count)
    try:
        assert cost.training_flops_per_sample(config) == counted
        with pytest.raises(AssertionError, match="counted again"):
            cost.training_flops_per_sample(ModelConfig(**{**config.__dict__, "embed_dim": 32}))
        cost.training_flops_per_sample.cache_clear()
        monkeypatch.setattr(cost, "_model_source_digest", lambda: "an edited model")
        with pytest.raises(AssertionError, match="counted again"):
            cost.training_flops_per_sample(config)
    finally:
        cost.training_flops_per_sample.cache_clear()
