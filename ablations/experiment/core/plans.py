"""The trials as experiment.json keeps them: name -> resolved configuration, and back."""

from __future__ import annotations

from typing import Any, Sequence

from ablations.config import TrialConfig
from ablations.search_spaces.spaces import TrialSpec


def trial_plan(trials: Sequence[TrialSpec]) -> dict[str, dict[str, Any]]:
    """The trials as experiment.json keeps them: name -> resolved config."""
    return {spec.name: spec.config.to_dict() for spec in trials}


def skipped_plan(skipped: Sequence[tuple[TrialSpec, str]]) -> dict[str, dict[str, Any]]:
    return {spec.name: {"reason": reason, "config": spec.config.to_dict()}
            for spec, reason in skipped}


def plan_from_metadata(meta: dict[str, Any]
                       ) -> tuple[list[TrialSpec], list[tuple[TrialSpec, str]]]:
    """Rebuild the trials and skipped cells that experiment.json recorded."""
    def spec(name: str, values: dict[str, Any]) -> TrialSpec:
        config = TrialConfig.from_dict(values)
        return TrialSpec(name, config.ablation, config.seed, config)

    trials = [spec(name, values) for name, values in meta.get("trials", {}).items()]
    order = {name: index for index, name in enumerate(meta.get("trial_order", []))}
    trials.sort(key=lambda item: order.get(item.name, len(order)))  # the plan's order
    skipped = [(spec(name, item["config"]), item["reason"])
               for name, item in meta.get("skipped", {}).items()]
    return trials, skipped
