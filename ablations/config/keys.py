"""Configuration keys as users write them (YAML, ``--set``, space files, ``TrialConfig.of``):
each flat key routed to its section of :class:`~ablations.config.TrialConfig`, aliases and
boolean presets users already keep, strict parsing, and the did-you-mean for unknown keys.

:func:`apply_overrides` is the one place a key meets the configuration, and
:func:`model_keys` the one place a model's own keys meet the runner's; ``ablations.config``
re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import fields
from typing import Any, Mapping, Optional, Sequence, TypeVar

from ablations.config.code import OWN_CODE_RUNNER_KEYS, is_own_code
from ablations.config.plugins import (
    BUILTIN_NAME,
    PluginError,
    load_plugin,
    plugin_config,
    plugin_keys,
)
from ablations.config.sections import SECTIONS
from ablations.config.values import (
    ConfigError,
    parse_bool,
    parse_float,
    parse_int,
    parse_scalar_names,
    parse_seed_sources,
)

Config = TypeVar("Config")  # a TrialConfig (ablations/config/trial.py, which imports this module)


# Every runner key users write -> its section ("" = the identity at the top level).
KEY_SECTION: dict[str, str] = {
    **{name: "" for name in ("ablation", "dataset", "seed", "seed_offset", "seed_sources")},
    **{f.name: section for section, kind in SECTIONS.items() for f in fields(kind)},
}
FIELD_TYPES: dict[str, str] = {
    **{name: "int" for name in ("seed", "seed_offset")}, "ablation": "str", "dataset": "str",
    "seed_sources": "str",
    **{f.name: str(f.type) for kind in SECTIONS.values() for f in fields(kind)},
}
MODEL_KEY = "model"  # the plugin ("" or "multimodal" = built-in); also "plugin"

# Keys users already keep in their YAML files, mapped onto the keys above.
ALIASES: dict[str, str] = {
    "learning_rate": "lr",
    "num_epochs": "epochs",
    "frames": "temporal_frames",
    "torch_compile_mode": "compile",
    "compile_mode": "compile",
    "checkpointing": "gradient_checkpointing",
}
# Keys whose meaning is a boolean that sets other keys.
BOOLEAN_PRESETS: dict[str, dict[bool, dict[str, Any]]] = {
    "memory_optimized": {True: {"cnn_widths": "32,64,128"}, False: {}},  # the built-in model's
    "torch_compile": {True: {}, False: {"compile": "off"}},  # mode comes from torch_compile_mode
}


def coerce(name: str, value: Any) -> Any:
    """Parse ``value`` (a string from YAML or the command line, or a Python value) for runner
    key ``name``, strictly."""
    kind = FIELD_TYPES[name]
    if kind == "bool":
        return parse_bool(value, name=name)
    if kind == "int":
        return parse_int(value, name)
    if kind == "float":
        return parse_float(value, name)
    if name == "drop_scalars":
        return parse_scalar_names(value)
    if name == "seed_sources":
        return parse_seed_sources(value)
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{name}: expected a single value, got {type(value).__name__}")
    return str(value).strip()


def unknown_key_error(key: str, source: str, plugin_keys: Sequence[str] = (), *,
                      own_code: bool = False) -> ConfigError:
    """An unknown key's error with the closest valid key: the runner's and the model's, or,
    for own code, its keys and the runner's it takes (:data:`OWN_CODE_RUNNER_KEYS`)."""
    valid = sorted({*OWN_CODE_RUNNER_KEYS, *plugin_keys} if own_code else
                   {*FIELD_TYPES, *ALIASES, *BOOLEAN_PRESETS, MODEL_KEY, *plugin_keys})
    close = difflib.get_close_matches(key.rpartition(".")[2], valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
    return ConfigError(f"{source}: unknown key {key!r}{hint}")


def _user_keys(overrides: Mapping[str, Any], source: str
               ) -> list[tuple[str, Any, Optional[str]]]:
    """(key, value, section or None) for each key: flat keys, ``section.key`` and section
    mappings (``optim: {lr: ...}``, ``model: {depth: 2}``) alike."""
    items: list[tuple[str, Any, Optional[str]]] = []
    for raw, value in overrides.items():
        key = str(raw).strip()
        section, dot, leaf = key.partition(".")
        if dot:
            if section not in (*SECTIONS, "model"):
                raise unknown_key_error(key, source)
            items.append((leaf, value, section))
        elif key in (*SECTIONS, "model") and isinstance(value, Mapping):
            items.extend((str(k).strip(), v, key) for k, v in value.items())
        else:
            items.append((key, value, None))
    return items


def apply_overrides(base: Config, overrides: Mapping[str, Any], *, source: str) -> Config:
    """``base`` with ``overrides`` applied. A key is a runner key (or an alias, or a boolean
    preset), ``model`` (the plugin), a key of the model's own config, or ``section.key``.

    ``torch_compile: true`` with no mode means ``compile: default``. A new ``model`` starts
    from that model's defaults.
    """
    items = _user_keys(overrides, source)
    plugin = base.plugin
    for key, value, section in items:
        if section is None and key in (MODEL_KEY, "plugin"):
            plugin = _plugin_name(value)
    own_keys = model_keys(plugin, source)
    own_code = is_own_code(load_plugin(plugin))  # its keys come first: the runner's do not apply
    changes: dict[str, dict[str, Any]] = {name: {} for name in ("", *SECTIONS)}
    model_values: dict[str, Any] = {}
    presets: dict[str, Any] = {}
    for key, value, section in items:
        if section is None and key in (MODEL_KEY, "plugin"):
            continue
        if section is None and key in BOOLEAN_PRESETS:
            flag = parse_bool(value, name=key)
            presets.update(BOOLEAN_PRESETS[key][flag])
            if key == "torch_compile" and flag:
                presets.setdefault("compile", "default" if base.systems.compile == "off"
                                   else base.systems.compile)
            continue
        name = ALIASES.get(key, key) if section is None else key
        if own_code and key in own_keys and section in (None, "model"):
            model_values[key] = value
        elif own_code and name not in OWN_CODE_RUNNER_KEYS:  # the runner's data, optim, model
            raise unknown_key_error(f"{section}.{key}" if section else key, source, own_keys,
                                    own_code=True)
        elif name in KEY_SECTION and section in (None, KEY_SECTION[name]):
            changes[KEY_SECTION[name]][name] = coerce(name, value)
        elif name in own_keys and section in (None, "model"):
            model_values[name] = value
        else:
            raise unknown_key_error(f"{section}.{key}" if section else key, source, own_keys)
    for name, value in presets.items():  # explicit keys win over a preset's
        if name in KEY_SECTION:
            if name == "compile" and value == "off":  # torch_compile: false wins over a mode
                changes["systems"][name] = value
            else:
                changes["systems"].setdefault(name, value)
        elif name in own_keys:
            model_values.setdefault(name, value)
        else:
            raise ConfigError(f"{source}: memory_optimized sets the built-in model's {name}; "
                              f"model {plugin} has no such key")
    model = base.model
    if plugin != base.plugin or model_values:
        previous = dataclasses.asdict(base.model) if plugin == base.plugin else {}
        model = plugin_config(plugin, {**previous, **model_values}, source=source)
    try:
        sections = {name: dataclasses.replace(getattr(base, name), **values)
                    for name, values in changes.items() if name and values}
        return dataclasses.replace(base, **changes[""], **sections, plugin=plugin, model=model)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _plugin_name(value: Any) -> str:
    """The ``model`` value: "" for the built-in model (also by its name), else the spec."""
    text = str(value).strip()
    return "" if text == BUILTIN_NAME else text


def model_keys(plugin: str, source: str) -> list[str]:
    """The config keys of the model ``plugin`` ("" = the built-in model).

    Raises:
        ConfigError: a plugin that does not load, or one with a key that is also the
            runner's (a flat key would name both; trials.parquet has one column per key).
    """
    try:
        keys = list(plugin_keys(plugin))
    except PluginError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    runner = {*KEY_SECTION, *ALIASES, *BOOLEAN_PRESETS, MODEL_KEY, "plugin"}
    if is_own_code(load_plugin(plugin)):  # own code's keys are its own (code.py checks them)
        runner = {MODEL_KEY, "plugin"}
    clash = [key for key in keys if key in runner]
    if clash:
        raise PluginError(f"{source}: model {plugin!r}: its config key {clash[0]!r} is also "
                          "the runner's; rename it in the plugin's config")
    return keys
