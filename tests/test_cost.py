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
