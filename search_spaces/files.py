"""Spaces as files: an ablation table in YAML, a reference and named diffs against it.

    name: conv3d                      # optional; default: the file's stem
    description: what the table asks  # optional
    reference: baseline               # optional; default: baseline
    model: examples.conv3d:PLUGIN     # optional; the model plugin the table is about
    variants:
      baseline: {}
      shallow: {depth: 1}

A variant's keys are any of the runner's config keys (docs/command-line.md, Configuration keys)
or the model plugin's; an unknown key is refused, naming the file, the variant and the closest
key, when the trials are expanded, before any trial starts. Values are parsed as the runner's
own keys are (booleans true/false/1/0/yes/no; YAML's on/off refused).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ablations.config import ConfigError
from ablations.config.values import arg
from ablations.config.comparison import DEFAULT_REFERENCE

TOP_LEVEL = ("name", "description", "reference", "model", "variants")


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
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{arg('space')} {path}: no such file (a space file is YAML with a "
                          "'variants' mapping; run_ablations.py list shows the built-in "
                          "spaces)")
    try:
        data = yaml.load(file.read_text(), Loader=yaml.BaseLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot be read ({type(exc).__name__})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{file}: not valid YAML{line}") from None
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
    name = data.get("name") or file.stem
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", name):
        raise ConfigError(f"{file}: name {name!r}: use letters, digits, '.', '_' and '-'")
    return {"name": name, "description": data.get("description", ""),
            "reference": reference, "model": data.get("model", ""), "variants": table,
            "path": str(file.resolve())}
