"""Fractional GPUs (--gpus-per-trial 0.5): each trial's CUDA allocator is capped at its share,
and the auto-batch probe measures in that share, so two half-GPU trials do not both size their
batch for the whole GPU. On the CPU: the decisions and the calls, with torch's CUDA call
recorded."""

from __future__ import annotations

import pytest
import ablations.trial.memory as memory
from ablations.experiment.execution.trainable import trial_gpu_share
from tests.conftest import tiny_config


@pytest.mark.parametrize(("asked", "share"), [(0.5, 0.5), (0.25, 0.25), (1.0, None), (2.0, None)])
def test_a_fraction_of_one_gpu_is_a_share_and_whole_gpus_are_not_capped(asked, share):
    assert memory.gpu_share(asked) == share


def test_a_share_must_be_positive():
    with pytest.raises(ValueError, match="must be positive"):
        memory.gpu_share(0.0)


def test_the_probe_runs_capped_at_the_trials_share_and_lifts_the_cap_after(monkeypatch):
    events = []
    monkeypatch.setattr(memory, "cap_gpu_memory", lambda device, share: events.append(share))
    monkeypatch.setattr(memory, "one_step_fits",
                        lambda config, data, size, device, hooks: events.append(size) or size <= 4)
    found = memory.probe_max_batch(tiny_config(), limit=16, gpu_fraction=0.5)
    assert found["batch"] == 4 and found["gpu_share"] == 0.5
    assert events[0] == 0.5 and events[-1] == 1.0  # capped before the first step, then lifted
    assert all(isinstance(e, int) for e in events[1:-1])


@pytest.mark.parametrize(("device", "assigned", "share"), [
    ("cuda", 0.5, 0.5), ("cuda", 1.0, None), ("cpu", 0.5, None), ("cuda", 0.0, None),
])
def test_a_trial_is_capped_at_the_gpu_fraction_ray_assigned_it(device, assigned, share):
    assert trial_gpu_share(tiny_config(device=device), assigned) == share
