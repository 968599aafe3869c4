"""Spaces as files: an ablation table in YAML, a reference and named diffs against it.

    name: conv3d                      # optional; default: the file's stem
    description: what the table asks  # optional
    reference: baseline               # optional; default: baseline
    model: examples.conv3d:PLUGIN     # optional; the model plugin the table is about
    variants:
      baseline: {}
      shallow: {depth: 1}

A table about a program (the command contract, docs/own-code.md) names it instead of
``model``, with its keys' defaults and its metrics:

    command: python train.py --hidden {hidden} --seed {seed} --metrics-file {metrics_file}
    config: {hidden: 64, dropout: 0.2}        # the keys and their defaults (types from them)
    metrics: {test_acc: higher, test_loss: lower nats}   # direction, then the unit

Any table may set ``time_limit: 30m`` (seconds, or ``90s``, ``15m``, ``2h``): each run of a
trial ends past it with status ``timeout`` (``--time-limit`` overrides it).

A variant's keys are any of the runner's config keys (docs/command-line.md, Configuration keys)
or the model plugin's; an unknown key is refused, naming the file, the variant and the closest
key, when the trials are expanded, before any trial starts. Values are parsed as the runner's
own keys are (booleans true/false/1/0/yes/no; YAML's on/off refused).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from ablations.config import ConfigError
from ablations.config.code import command_from, command_spec
from ablations.config.values import (
    QuotedText,
    TextLoader,
    arg,
    command,
    expanded_path,
    yaml_problem,
)
from ablations.config.comparison import DEFAULT_REFERENCE

TOP_LEVEL = ("name", "description", "reference", "model", "variants", "command", "config",
             "metrics", "values", "datasets", "time_limit")


def is_space_file(name: str) -> bool:
    """``--space`` names a file: it ends with .yaml/.yml or is an existing file."""
    return name.endswith((".yaml", ".yml")) or Path(name).is_file()


def load_space_file(path: str | Path) -> dict[str, Any]:
    """The table in ``path``: ``{"name", "description", "reference", "model", "variants"}``,
    the variants as ``name -> {key: value as a string}``.

    Raises:
        ConfigError: a missing or unreadable file, not YAML, not a mapping, an unknown
            top-level key, no variants, a variant that is not a mapping, or a reference that
            is not among the variants; one line naming the file.
    """
    file = expanded_path(path, arg("space"))
    if not file.is_file():
        raise ConfigError(f"{arg('space')} {path}: no such file (a space file is YAML with a "
                          f"'variants' mapping; {command('list')} shows the built-in spaces)")
    try:
        data = yaml.load(file.read_text(), Loader=TextLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot be read ({type(exc).__name__})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping with 'variants' at the top level")
    unknown = [k for k in data if k not in TOP_LEVEL]
    if unknown:
        raise ConfigError(f"{file}: unknown top-level key {unknown[0]!r}; a space file has "
                          f"{', '.join(TOP_LEVEL)}")
    variants = data.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise ConfigError(f"{file}: 'variants' must be a non-empty mapping of name -> diff")
    table: dict[str, dict[str, Any]] = {}
    for name, diff in variants.items():
        if diff in (None, "", "{}"):
            diff = {}
        if not isinstance(diff, dict):
            raise ConfigError(f"{file}: variant {name!r} must be a mapping of config keys "
                              "(use {} for the reference)")
        if not str(name).replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{file}: variant name {name!r}: use letters, digits, _ and -")
        table[str(name)] = dict(diff)
    reference = str(data.get("reference", DEFAULT_REFERENCE))
    if reference not in table:
        raise ConfigError(f"{file}: reference {reference!r} is not among the variants "
                          f"({', '.join(table)})")
    for key in ("name", "description", "model"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{file}: {key!r} must be a string")
    model = data.get("model", "")
    if "command" in data:
        model = _command_model(file, data)
    elif any(key in data for key in ("config", "metrics")):
        key = next(key for key in ("config", "metrics") if key in data)
        raise ConfigError(f"{file}: {key!r} belongs to a table about a program: give its "
                          "'command' too (a training function declares them in Python)")
    time_limit = None
    if "time_limit" in data:
        from ablations.trial.time_limit import parse_duration

        try:
            time_limit = parse_duration(data["time_limit"])
        except ValueError as exc:
            raise ConfigError(f"{file}: time_limit: {exc}") from None
    name = data.get("name") or file.stem
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", name):
        raise ConfigError(f"{file}: name {name!r}: use letters, digits, '.', '_' and '-'")
    return {"name": name, "description": data.get("description", ""),
            "reference": reference, "model": model, "variants": table,
            "path": str(file.resolve()), "datasets": _datasets(file, data.get("datasets")),
            "time_limit_s": time_limit}


def _datasets(file: Path, given: Any) -> dict[str, Any] | None:
    """A space file's ``datasets:`` (docs/datasets.md): name -> a directory (relative to the
    file's folder), ``synthetic``, or a mapping of the keys that select it; None if absent."""
    if given is None:
        return None
    if not isinstance(given, dict) or not given:
        raise ConfigError(f"{file}: 'datasets' must be a mapping of name -> a directory, "
                          "'synthetic' or a mapping of config keys")
    out: dict[str, Any] = {}
    for name, value in given.items():
        if isinstance(value, dict):
            value = dict(value)
            if value.get("data_dir"):
                value["data_dir"] = str((file.parent / value["data_dir"]).resolve())
        elif isinstance(value, str) and value and value != "synthetic":
            value = str((file.parent / expanded_path(value, str(file))).resolve())
        elif value != "synthetic":
            raise ConfigError(f"{file}: dataset {name!r}: give a directory, 'synthetic' or a "
                              "mapping of config keys")
        out[str(name)] = value
    return out


def _command_model(file: Path, data: dict[str, Any]) -> str:
    """The ``model`` spec of a table about a program: its command, its keys' defaults (typed
    as YAML reads them: 64 an int, 0.2 a float, true a boolean), its metrics and the form its
    values are written in (``values:``)."""
    if data.get("model"):
        raise ConfigError(f"{file}: give 'model' (Python code) or 'command' (a program), "
                          "not both")
    config = data.get("config") or {}
    if not isinstance(config, dict) or not isinstance(data["command"], str):
        raise ConfigError(f"{file}: 'command' must be a string and 'config' a mapping of "
                          "keys to default values")
    defaults = {str(key): typed(value) for key, value in config.items()}
    return command_spec(command_from(data["command"], defaults, data.get("metrics") or {},
                                     source=str(file), values=data.get("values")))


# YAML 1.2's core schema (yaml.org/spec/1.2.2, 10.3.2): what a plain scalar's text means. Not
# YAML 1.1's (PyYAML's safe_load), which reads off and NO as false, 010 as 8 and 12:30 as 750.
_CORE_BOOL = {"true": True, "True": True, "TRUE": True,
              "false": False, "False": False, "FALSE": False}
_CORE_INT = re.compile(r"[-+]?[0-9]+")
_CORE_OCT, _CORE_HEX = re.compile(r"0o[0-7]+"), re.compile(r"0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_CORE_SPECIAL = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf,
                 "+.inf": math.inf, "+.Inf": math.inf, "+.INF": math.inf,
                 "-.inf": -math.inf, "-.Inf": -math.inf, "-.INF": -math.inf,
                 ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}


def typed(value: Any) -> Any:
    """A scalar read as text, typed by YAML 1.2's core schema: 64 an int, 0.2 a float, true a
    boolean; anything else (off, NO, 12:30, a word) and anything quoted the text as written;
    a list's items and a mapping's values each typed so."""
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, dict):
        return {str(key): typed(item) for key, item in value.items()}
    if not isinstance(value, str) or isinstance(value, QuotedText):
        return str(value) if isinstance(value, QuotedText) else value
    if value in _CORE_BOOL:
        return _CORE_BOOL[value]
    if _CORE_INT.fullmatch(value):
        return int(value)
    if _CORE_OCT.fullmatch(value):
        return int(value[2:], 8)
    if _CORE_HEX.fullmatch(value):
        return int(value[2:], 16)
    if _CORE_FLOAT.fullmatch(value):
        return float(value)
    return _CORE_SPECIAL.get(value, value)
