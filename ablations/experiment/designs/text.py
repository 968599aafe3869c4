"""The words every design shares when it describes itself (:class:`~ablations.experiment.
designs.base.Design`'s describing methods): the dry run's listing of trials. How many trials a
resume keeps, continues and starts: resume_text.py."""

from __future__ import annotations

from typing import Any, Sequence

from ablations.config import TrialConfig

# what planning records of a systems setting it mapped (ablations/config/safety.py): the
# setting asked for, beside the one it runs with
REQUESTED = {"compile_requested": "compile", "precision_requested": "precision"}


def describe_trials(trials: Sequence[Any], base: TrialConfig,
                    skipped: Sequence[tuple[Any, str]] = ()) -> str:
    """The dry-run listing: the base config once, then each trial and what differs from it
    (a program's trial: the command line it runs), then the skipped cells with their
    reasons."""
    from ablations.trial.command import planned_command_line

    lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped else "")
             + ". Base configuration:"]
    shown = base.flat()
    for key, value in shown.items():
        # a requested setting only where it was mapped: the base runs with another
        mapped = key in REQUESTED and value and value != shown[REQUESTED[key]]
        if key not in ("ablation", "seed", *REQUESTED) or mapped:
            lines.append(f"  {key}: {value}")
    lines.append("Trials (name: differences from the base):")
    code = base.own_code
    command = code if code is not None and not hasattr(code, "fit") else None
    for index, spec in enumerate(trials, 1):
        diff = spec.config.diff(base)
        flat = spec.config.flat()
        for key in ("ablation", "seed", *REQUESTED):
            diff.pop(key, None)
        # a setting --resolve-conflicts mapped: the value it runs with, and what was asked
        diff.update({key: flat[key] for key, setting in REQUESTED.items()
                     if flat[key] and flat[key] != flat[setting]})
        shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(base)"
        lines.append(f"  {index:>3}. {spec.name:<32} {shown}")
        if command is not None:  # a program's trial: the line it runs
            lines.append(f"       $ {planned_command_line(command, spec.config, spec.name)}")
    if skipped:
        lines.append("Skipped (conflicts with this device or data; not run):")
        for spec, reason in skipped:
            lines.append(f"   SKIP {spec.name:<32} {reason}")
    return "\n".join(lines)
