"""What fills a command's line and environment (ablations/trial/command.py runs it): the
user's keys in their forms and the runner's fields, the line split like a shell does with
each ``{field}`` filled, ``ABLATIONS_CONFIG`` and ``ABLATIONS_<FIELD>``; and, before any trial
starts, the values no program could receive and the keys a line would leave unchanged."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from ablations.config.code import COMMAND_FIELDS, FIELD, FLAG, Command, field_default
from ablations.config.value_forms import DEFAULT_FORM, written
from ablations.trial.own_code import OwnCodeError, Trial

METRICS_FILE = "metrics.jsonl"
RESUME_DIR = "resume"

# Linux's MAX_ARG_STRLEN (32 pages): one argument or environment string a program receives
# holds fewer bytes than this, its terminating NUL included
MAX_ARGUMENT_BYTES = 32 * 4096


def value_problem(config: Any) -> Optional[str]:
    """Why the values of a command's keys (``config``: its dataclass) cannot reach its
    program, in words for a one-line error; None when they can. A value may not hold a NUL
    byte (arguments and environment strings end at one) nor be as long as
    :data:`MAX_ARGUMENT_BYTES`; nor may ``ABLATIONS_CONFIG``, every key as JSON."""
    values = dataclasses.asdict(config)
    for key, value in values.items():
        text = _text(value)
        if "\0" in text:
            return (f"{key}: the value holds a NUL byte, which no program receives in its "
                    "arguments or environment; remove it")
        size = len(text.encode())
        if size >= MAX_ARGUMENT_BYTES:
            return (f"{key}: the value is {size:,} bytes; a program's argument holds at most "
                    f"{MAX_ARGUMENT_BYTES - 1:,} (Linux's MAX_ARG_STRLEN): pass the path of a "
                    "file that holds it instead")
    size = len(f"ABLATIONS_CONFIG={json.dumps(values, sort_keys=True)}".encode())
    if size >= MAX_ARGUMENT_BYTES:
        return (f"the keys' values are {size:,} bytes as JSON (the program's ABLATIONS_CONFIG); "
                f"an environment string holds at most {MAX_ARGUMENT_BYTES - 1:,}: pass large "
                "values as paths of files")
    return None


def unused_key_problem(command: Command, config: Any) -> Optional[str]:
    """Why a trial of ``command`` would run as if a key it changes were not changed, in words
    for a one-line error; None when it would not. A program that takes its keys on its command
    line (the line has a ``{key}`` of the user's) gets a key only there: a key a trial sets
    away from its default that the line never names would reach the program in
    ``ABLATIONS_CONFIG`` alone, and the trial would repeat another. A line that names no key
    of the user's is a program that reads ``ABLATIONS_CONFIG``: nothing to check."""
    values = dataclasses.asdict(config)
    on_line = set(FIELD.findall(command.run)) | {key for key, _ in FLAG.findall(command.run)}
    if not on_line & set(values):
        return None
    defaults = {f.name: field_default(f) for f in dataclasses.fields(config)}
    changed = [key for key, value in values.items()
               if key not in on_line and value != defaults.get(key)]
    if not changed:
        return None
    key = changed[0]
    return (f"{key}={values[key]!r} changes a key the command line never names, so the program "
            f"would run as with {key}={defaults.get(key)!r}; put {{{key}}} on the line (e.g. "
            f"--{key.replace('_', '-')} {{{key}}}) or drop it from the variant")


def command_values(config: Any, trial: Trial,
                   forms: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """What fills the command line's fields: the user's keys, each in its form (``forms``: key
    -> form, ablations/config/value_forms.py), then the runner's."""
    folder = Path(trial.folder).resolve()
    values = {key: written(value, (forms or {}).get(key, DEFAULT_FORM))
              for key, value in dataclasses.asdict(config).items()}
    values.update(seed=str(trial.seed), init_seed=str(trial.seeds.init),
                  order_seed=str(trial.seeds.order), data_seed=str(trial.seeds.data),
                  trial=trial.name, ablation=trial.ablation, dataset=trial.dataset,
                  trial_dir=str(folder),
                  metrics_file=str(folder / METRICS_FILE), resume_dir=str(folder / RESUME_DIR),
                  device=trial.device.type, python=sys.executable, port=str(free_port()),
                  gpus=str(int(trial.resources.get("GPU", 0))))
    return values


def free_port() -> int:
    """A TCP port no process listens on now, on this node: two launcher-started trials on one
    node (torchrun's default 29500) each get their own."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def planned_command_line(command: Command, trial: Any, name: str) -> str:
    """The command line the trial ``name`` (its TrialConfig: ``trial``) will run, as a dry
    run shows it: the user's keys and the runner's fields filled as :func:`command_values`
    fills them, the paths made at launch shown as ``<trial_dir>``, ``<metrics_file>`` and
    ``<resume_dir>``, the port and GPUs given at launch as ``<port>`` and ``<gpus>``, the
    worker's Python as ``{python}``; quoted as a shell would need it."""
    values = {key: written(value, command.forms.get(key, DEFAULT_FORM))
              for key, value in dataclasses.asdict(trial.model).items()}
    seeds = trial.seeds
    values.update(seed=str(trial.seed), init_seed=str(seeds.init), order_seed=str(seeds.order),
                  data_seed=str(seeds.data), trial=name, ablation=trial.ablation,
                  dataset=trial.dataset, trial_dir="<trial_dir>",
                  metrics_file="<metrics_file>", resume_dir="<resume_dir>",
                  device=trial.systems.device, python="{python}", port="<port>",
                  gpus="<gpus>")
    return shlex.join(command_line(command.run, values)).replace("'{python}'", "{python}")


def command_line(run: str, values: Mapping[str, str]) -> list[str]:
    """The program's arguments: ``run`` split like a shell does, then each argument's
    ``{field}``s filled from ``values`` (so a value with a space stays one argument)."""
    try:
        arguments = shlex.split(run)
    except ValueError as exc:  # an unclosed quote
        raise OwnCodeError(f"command {run!r}: {exc}") from None

    def fill(match: Any) -> str:
        if match.group(1) not in values:
            raise OwnCodeError(f"command {run!r}: no value for {{{match.group(1)}}}")
        return values[match.group(1)]

    def flag(match: Any) -> str:  # {key:--flag}: the flag where the boolean key is true
        return match.group(2) if fill(match) == "true" else ""

    filled = []
    for argument in arguments:
        with_flags = FLAG.sub(flag, argument)
        if with_flags or not FLAG.search(argument):  # an argument that was only flags, all off
            filled.append(FIELD.sub(fill, with_flags))
    return filled


def command_environment(config: Any, values: Mapping[str, str],
                        base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``base`` (the worker's environment) with ``ABLATIONS_CONFIG`` (the user's keys as
    JSON) and ``ABLATIONS_<FIELD>`` for each of the runner's fields."""
    environment = dict(os.environ if base is None else base)
    environment["ABLATIONS_CONFIG"] = json.dumps(dataclasses.asdict(config), sort_keys=True)
    environment.update({f"ABLATIONS_{field.upper()}": values[field] for field in COMMAND_FIELDS})
    return environment


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["MAX_ARGUMENT_BYTES", "METRICS_FILE", "RESUME_DIR", "command_environment",
           "command_line", "command_values", "free_port", "planned_command_line",
           "unused_key_problem", "value_problem"]
