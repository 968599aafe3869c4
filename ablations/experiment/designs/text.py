"""The words every design shares when it describes itself (:class:`~ablations.experiment.
designs.base.Design`'s describing methods): the dry run's listing of trials. How many trials a
resume keeps, continues and starts: resume_text.py."""

from __future__ import annotations

from typing import Any, Sequence

from ablations.config import TrialConfig
from ablations.config.code import Command

# what planning records of a systems setting it mapped (ablations/config/safety.py): the
# setting asked for, beside the one it runs with
REQUESTED = {"compile_requested": "compile", "precision_requested": "precision"}


def describe_trials(trials: Sequence[Any], base: TrialConfig,
                    skipped: Sequence[tuple[Any, str]] = ()) -> str:
    """The dry-run listing: the base config once, then each trial and what differs from it
    (a program's trial: the command line it runs), then the skipped cells with their
    reasons."""
    from ablations.trial.command import planned_command_line

    command = base.own_code if isinstance(base.own_code, Command) else None
    if command is not None:  # a program: its line, keys and metrics, not the runner's config
        lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped
                                            else "") + ". The program:",
                 *program_lines(command)]
    else:
        lines = [f"{len(trials)} trials" + (f" ({len(skipped)} more skipped)" if skipped
                                            else "") + ". Base configuration:"]
        shown = base.flat()
        for key, value in shown.items():
            # a requested setting only where it was mapped: the base runs with another
            mapped = key in REQUESTED and value and value != shown[REQUESTED[key]]
            if key not in ("ablation", "seed", *REQUESTED) or mapped:
                lines.append(f"  {key}: {value}")
    lines.append("Trials (name: differences from the base):")
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


def program_lines(command: Any) -> list[str]:
    """A program's description in the dry run: its command line, its keys' defaults (in the
    form its line fills them) and where each metric is read from."""
    from ablations.config.value_forms import DEFAULT_FORM, written

    lines = [f"  command: {command.run}"]
    if command.defaults:
        lines.append("  keys: " + ", ".join(
            f"{key}={written(value, command.forms.get(key, DEFAULT_FORM))}"
            for key, value in command.defaults.items()))
    for name, metric in command.metrics.items():
        if name in command.printed:
            where = f"printed, pattern {command.printed[name]!r}"
        elif name in command.files:
            spec = command.files[name]
            where = f"{spec['kind']} {spec['path']}" + (
                f", {spec['key']}" if spec["key"] != name else "")
        else:
            where = "{metrics_file} lines or the last JSON line on stdout"
        unit = f" {metric.unit}" if metric.unit else ""
        lines.append(f"  metric {name} ({metric.direction}{unit}): {where}")
    return lines
