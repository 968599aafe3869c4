"""Ray Tune's usage tag of the callbacks (ablations/experiment/execution/tune_usage.py): left out
while Ray's usage statistics are off, taken as Tune takes it while they are on."""

from __future__ import annotations

import pytest

from ablations.experiment.execution.tune_usage import no_unsent_callback_tag


@pytest.fixture
def counted(monkeypatch):
    """Ray's tag, with its counting (the part that imports the trackers' integrations)
    recorded instead of done."""
    import ray.air._internal.usage as usage

    calls = []
    monkeypatch.setattr(usage, "_count_callbacks", lambda callbacks: calls.append(callbacks))
    monkeypatch.setattr(usage, "record_extra_usage_tag", lambda *args: None)
    return usage, calls


def test_with_usage_statistics_off_the_callbacks_are_not_counted(counted, monkeypatch):
    usage, calls = counted
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    original = usage.tag_callbacks
    with no_unsent_callback_tag():
        assert usage.tag_callbacks(["a callback"]) is False
    assert calls == []
    assert usage.tag_callbacks is original  # Tune's own again after the run


def test_with_usage_statistics_on_tune_tags_them_as_it_does(counted, monkeypatch):
    usage, calls = counted
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    with no_unsent_callback_tag():
        usage.tag_callbacks(["a callback"])
    assert calls == [["a callback"]]
