"""CUDA-graph compile modes and Tune's trial threads (pytorch #123177): the CUDA-graph trees'
thread-local containers must exist in any thread (torch >= 2.13), else the runner refuses the
CUDA-graph modes before any trial starts. Runs on the CPU: creating a container touches no GPU."""

from __future__ import annotations

import threading

import pytest

from ablations.config.safety import find_conflicts, torch_release
from tests.conftest import tiny_config


def test_a_cuda_graph_container_can_be_created_in_a_new_thread_as_tune_runs_trials():
    from torch._inductor import cudagraph_trees

    made, errors = [], []

    def trial_thread() -> None:  # what Tune's function trainable does: a fresh thread per trial
        try:
            made.append(cudagraph_trees.get_container(0))
        except Exception as exc:  # noqa: BLE001 - the assertion of torch < 2.13 is the point
            errors.append(exc)

    for _ in range(2):  # a second trial in the same (reused) process
        thread = threading.Thread(target=trial_thread)
        thread.start()
        thread.join()
    assert errors == [] and len(made) == 2


@pytest.mark.parametrize(("version", "release"), [
    ("2.13.0+cpu", (2, 13)), ("2.5.1", (2, 5)), ("2.12.0a0+git1234", (2, 12)), ("3.0.0", (3, 0)),
])
def test_torch_release_reads_major_and_minor(version, release):
    assert torch_release(version) == release


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_modes_are_refused_before_torch_2_13_and_allowed_from_it(monkeypatch, mode):
    import ablations.config.safety as safety

    config = tiny_config(compile=mode)
    monkeypatch.setattr(safety, "torch_release", lambda: (2, 12))
    old = find_conflicts(config, "cuda", (8, 0))
    assert len(old) == 1 and "#123177" in old[0].problem
    assert old[0].replacement == {"compile": safety.NO_CUDA_GRAPH_MODE[mode]}
    monkeypatch.setattr(safety, "torch_release", lambda: (2, 13))
    assert find_conflicts(config, "cuda", (8, 0)) == []
    assert find_conflicts(tiny_config(compile="default"), "cuda", (8, 0)) == []
