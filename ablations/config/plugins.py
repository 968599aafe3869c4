"""Models as plugins: the runner's machinery (safe switches, OOM recovery, paired seeds,
verdicts, Parquet, resume, clusters) around any model.

A plugin is a :class:`ModelPlugin` that a module exposes under a name; ``--model
package.module:NAME`` (or the ``model`` key of a config file) selects it; the built-in
multimodal model is the default (``model`` empty). A plugin provides:

- ``config``: a frozen dataclass of the model's own switches with their defaults, and
  optionally a ``validate()`` method that raises ``ValueError`` naming a bad value. Its fields
  are config keys like the runner's: ``--set depth=2``, a space's variant ``{depth: 1}``, a
  YAML key. Booleans, integers, floats and strings are parsed as the runner's own keys are.
- ``build(config, shape)``: the ``nn.Module`` for the data's shapes (:class:`DataShape`), its
  weights initialised from torch's RNG (the runner seeds it per trial). ``forward(frames,
  scalars)`` takes the batch, frames ``(B, T, C, H, W)`` (an empty tensor when
  ``use_images`` is false) and scalars ``(B, S)`` (empty when ``use_scalars`` is false), both
  normalised, and returns ``(mean, variance)`` of shape ``(B,)`` each, in standardised target
  units; ``variance`` is ``None`` for a point estimate (trained with MSE; else Gaussian NLL).
- ``checkpoint_blocks(model)`` (optional): names of the submodules gradient checkpointing
  wraps (``model.get_submodule(name)``; each is recomputed in the backward pass). A plugin
  without it refuses ``gradient_checkpointing=true`` before any trial starts.

The runner's systems switches apply unchanged: compile (``torch.compile`` of the module),
precision (autocast), ``channels_last`` (per tensor rank: NHWC for 4-D parameters, NDHWC for
5-D ones, ``ablations.trial.model_builder.to_channels_last``), OOM recovery and gradient
accumulation (they act on the optimiser step).
docs/plugins.md says the same for users; examples/conv3d.py is a plugin.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from ablations.config.code import COMMAND_PREFIX, OwnCode, command_of
from ablations.config.values import ConfigError, parse_bool
from ablations.model.config import MultimodalSwitches

if TYPE_CHECKING:  # a plugin's module imports torch; the registry does not need it
    from torch import nn


class PluginError(ConfigError):
    """A plugin that cannot be loaded or a plugin key that is not one; one line."""


@dataclass(frozen=True)
class DataShape:
    """What a plugin's ``build`` gets to know about the data."""

    frames: int  # T, the frames the model sees (the runner's temporal_frames)
    channels: int  # C
    height: int  # H
    width: int  # W
    scalars: int  # S: scalar columns the model sees (0 without use_scalars)
    uses_images: bool  # False: forward gets frames=None (use_images=false)


@dataclass(frozen=True)
class ModelPlugin:
    """A model the runner can ablate; see the module docstring."""

    name: str
    config: type  # a frozen dataclass: the model's switches and defaults
    build: Callable[[Any, DataShape], nn.Module]
    checkpoint_blocks: Optional[Callable[[nn.Module], Sequence[str]]] = None


def _build_builtin(switches: Any, shape: DataShape) -> nn.Module:
    from ablations.model.model import ModelConfig, build_model

    return build_model(ModelConfig(
        **dataclasses.asdict(switches), in_channels=shape.channels, image_height=shape.height,
        image_width=shape.width, num_scalars=shape.scalars, temporal_frames=shape.frames,
        use_images=shape.uses_images, use_scalars=shape.scalars > 0))


BUILTIN_NAME = "multimodal"  # the built-in model's name as a ``model`` value
# The built-in multimodal model (model/model.py) as a plugin: ``model`` "" or "multimodal".
# The runner builds it with its systems flags (ablations/trial/model_builder.py); ``build``
# serves callers outside the runner.
BUILTIN = ModelPlugin(name=BUILTIN_NAME, config=MultimodalSwitches, build=_build_builtin)

_CACHE: dict[str, Any] = {"": BUILTIN}  # a ModelPlugin, TrainingFunction or Command


# A module's dotted name, as ``importlib.import_module`` takes it without a package
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def import_failure(exc: BaseException) -> str:
    """Where and why a module's import failed, in one line: the exception, and the file and
    line of the user's code that raised it (a SyntaxError's own)."""
    import traceback

    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if "importlib" not in frame.filename]
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}{': ' + first if first else ''}{where}"


def load_plugin(spec: str) -> Any:
    """The model ``package.module:NAME`` names (imported once per process): a
    :class:`ModelPlugin`, or own code (ablations/config/code.py: a ``TrainingFunction``, or a
    ``Command`` carried as ``command:<JSON>``).

    Raises:
        PluginError: a spec that is not ``module:NAME``, a module that does not import, a
            name it lacks, or an object that is none of the three.
    """
    if spec in _CACHE:
        return _CACHE[spec]
    if spec.startswith(COMMAND_PREFIX):
        try:
            _CACHE[spec] = command_of(spec)
        except (ValueError, KeyError) as exc:
            raise PluginError(f"model {spec[:60]!r}: not a command spec ({exc})") from None
        return _CACHE[spec]
    module_name, _, attribute = spec.partition(":")
    if not MODULE_NAME.fullmatch(module_name) or not attribute.isidentifier():
        raise PluginError(f"model {spec!r}: give package.module:NAME (a module's dotted name "
                          "as Python imports it, not a path), e.g. examples.conv3d:PLUGIN")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"model {spec!r}: cannot import {module_name} ({exc}); is it in the "
                          "folder the command starts in, installed, or on PYTHONPATH?") from None
    except Exception as exc:  # the module's own code failed while it was imported
        raise PluginError(f"model {spec!r}: importing {module_name} failed: "
                          f"{import_failure(exc)}; fix the module and run again") from None
    plugin = getattr(module, attribute, None)
    if plugin is None:
        raise PluginError(f"model {spec!r}: {module_name} has no {attribute!r}")
    if not isinstance(plugin, (ModelPlugin, OwnCode)) or \
            not dataclasses.is_dataclass(plugin.config):
        raise PluginError(f"model {spec!r}: {attribute} is not an ablations.config.plugins."
                          "ModelPlugin or own code (an ablations.contract.TrainingFunction, "
                          "or another OwnCode) with a dataclass config")
    _CACHE[spec] = plugin
    return plugin


def plugin_keys(spec: str) -> dict[str, Any]:
    """The model's config keys and their types (the built-in model's for ``spec`` "")."""
    return {f.name: f.type for f in dataclasses.fields(load_plugin(spec).config)}


def held_like(value: Any, default: list | dict) -> list | dict:
    """A list or mapping key's value (a YAML list or mapping, its items as text, or its text
    as YAML's flow style writes it: ``[32, 64]``), each item typed as the default's items are
    (its first item's type for a list, the same key's for a mapping).

    Raises:
        ValueError: a value that is not of the default's kind, or an item that is not of its
            type.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(value) from None
    if isinstance(default, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(value)
        return [_item_like(item, default[0] if default else None) for item in value]
    if not isinstance(value, Mapping):
        raise ValueError(value)
    return {str(key): _item_like(item, default.get(str(key))) for key, item in value.items()}


def _item_like(item: Any, example: Any) -> Any:
    """``item`` of type ``example``'s where it is text and the example a boolean or number."""
    if not isinstance(item, str) or isinstance(example, str) or example is None:
        return item
    if isinstance(example, bool):
        return parse_bool(item)
    return type(example)(item.strip())


def plugin_config(spec: str, options: Mapping[str, Any], *, source: str = "model") -> Any:
    """The plugin's config with ``options`` (key -> value, values as strings or typed)
    applied to its defaults, parsed like the runner's keys and validated.

    Raises:
        PluginError: an unknown key (with a did-you-mean), a value of the wrong type, or what
            the config's ``validate`` refuses.
    """
    plugin = load_plugin(spec)
    defaults = plugin.config()
    fields = {f.name: f for f in dataclasses.fields(plugin.config)}
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; its keys: {', '.join(fields)}"
            raise PluginError(f"{source}: unknown key {key!r} of model {plugin.name}{hint}")
        kind = type(getattr(defaults, key))
        try:
            if kind is bool:
                values[key] = parse_bool(value, name=key)
            elif kind in (int, float):
                if isinstance(value, bool):
                    raise ValueError
                values[key] = kind(str(value).strip()) if isinstance(value, str) else kind(value)
                if kind is int and isinstance(value, float) and value != int(value):
                    raise ValueError
            elif kind in (list, dict):
                values[key] = held_like(value, getattr(defaults, key))
            elif isinstance(value, (list, tuple)):  # a YAML list for a text key: 64,128,256
                values[key] = ",".join(str(item).strip() for item in value)
            else:
                values[key] = kind(value)
        except (ValueError, TypeError, ConfigError):
            wanted = {int: "an integer", float: "a number", bool: "true or false",
                      list: "a list", dict: "a mapping"}.get(
                kind, kind.__name__)
            raise PluginError(f"{source}: {key}={value!r} is not {wanted}, as its default "
                              f"{getattr(defaults, key)!r} is") from None
    model = "" if plugin is BUILTIN else f"model {plugin.name}: "
    try:
        config = dataclasses.replace(defaults, **values)
        validate = getattr(config, "validate", None)
        if callable(validate):
            validate()
    except ValueError as exc:
        raise PluginError(f"{source}: {model}{exc}") from None
    return config
