"""A trial's configuration: one typed, nested dataclass; strict parsing.

:class:`TrialConfig` has the trial's identity and four sections: ``data``, ``model`` (the
model's own switches: the built-in model's ``ablations.model.config.MultimodalSwitches`` or a
plugin's config), ``optim`` and ``systems`` (the data, optim and systems sections are in
ablations/config/sections.py). Users write flat keys (YAML, ``--set``, space files):
:func:`apply_overrides` (ablations/config/keys.py) finds each key's section. The driver
validates every trial before any starts and sends ``to_dict()`` to Ray; the worker rebuilds
the typed config with :meth:`TrialConfig.from_dict`.

The modules import in one direction: ``values`` (one value) -> ``sections`` -> ``plugins`` ->
``keys`` -> ``trial``. The package exports what other layers use:
``from ablations.config import TrialConfig, apply_overrides, parse_bool``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ablations.config.code import OWN_CODE_SWITCHES, is_own_code
from ablations.config.comparison import DEFAULT_REFERENCE
from ablations.config.keys import apply_overrides
from ablations.config.plugins import BUILTIN_NAME, load_plugin, plugin_config
from ablations.config.sections import DataConfig, OptimConfig, SystemsConfig
from ablations.config.values import (
    ConfigError,
    at_least,
    load_yaml_overrides,
    parse_seed_sources,
    seed_levels,
)
from ablations.model.config import MultimodalSwitches

# Which sources vary with the trial's seed by default: all three (Bouthillier et al. 2021:
# randomise every source, so that a conclusion holds beyond one draw of the data). Both arms of
# a seed pair still see the same draw. ``init,order`` holds the data draw at ``data_seed``, as
# seed ensembles need and as the runs measured before commit 2eca4bb did (docs/seed-sources.md).
DEFAULT_SEED_SOURCES = "init,order,data"


@dataclass(frozen=True)
class TrialSeeds:
    """The seed of each source of a trial's randomness (:attr:`TrialConfig.seeds`); recorded
    per trial as trials.parquet's ``init_seed``, ``order_seed`` and ``data_seed``."""

    init: int  # torch's generator: weight initialisation and dropout (the same generator)
    # the order of the training samples in each epoch (ablations.trial.batches.epoch_order)
    order: int
    data: int  # the data draw: synthetic set, split of a file dataset, caps, normalisation sample

    def columns(self) -> dict[str, int]:
        return {"init_seed": self.init, "order_seed": self.order, "data_seed": self.data}


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs, in sections: ``data``, ``model`` (the model's own switches:
    the built-in model's :class:`~ablations.model.config.MultimodalSwitches`, or the plugin's
    config), ``optim`` and ``systems``.

    Users write flat keys (``lr``, ``cnn_widths``, ``--set depth=2``): every key names one field
    of one section (:func:`apply_overrides` finds it), or ``section.key``. :meth:`to_dict`
    (nested plain values) goes to Ray and to experiment.json as it is; :meth:`flat` is the
    row of trials.parquet.
    """

    ablation: str = DEFAULT_REFERENCE  # name of the variant in its space's table
    # the dataset the trial trains on, by its name in an experiment over several datasets
    # (docs/datasets.md); seeds pair within a dataset
    dataset: str = ""
    seed: int = 0  # the pairing key: the same seeds for every variant; the sources' seeds below
    # Added to ``seed`` for the training randomness only (init, order; ``seed`` stays the
    # pairing key): a variant equal to the reference with an offset is the reference under
    # other seeds, a null control (--null-control).
    seed_offset: int = 0
    # The sources that vary with ``seed`` (SEED_SOURCES: init, order, data); a source left out
    # is held at its value at seed 0, ``source=K`` at seed K. See DEFAULT_SEED_SOURCES.
    seed_sources: str = DEFAULT_SEED_SOURCES
    # The model: "" = the built-in multimodal model; else a plugin, "package.module:NAME"
    # (ablations/config/plugins.py, docs/plugins.md). The user's key for it is ``model``.
    plugin: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: Any = field(default_factory=MultimodalSwitches)  # an instance of the plugin's config
    optim: OptimConfig = field(default_factory=OptimConfig)
    systems: SystemsConfig = field(default_factory=SystemsConfig)

    def __post_init__(self) -> None:
        at_least(self, 0, "seed_offset")
        object.__setattr__(self, "seed_sources", parse_seed_sources(self.seed_sources))
        expected = load_plugin(self.plugin).config
        if type(self.model) is not expected:
            raise ConfigError(f"model: {type(self.model).__name__} is not the config of model "
                              f"{self.plugin or BUILTIN_NAME} ({expected.__name__})")

    @classmethod
    def of(cls, **keys: Any) -> "TrialConfig":
        """The defaults with flat ``keys`` applied (``TrialConfig.of(lr=1e-3, epochs=2)``)."""
        return apply_overrides(cls(), keys, source="config")

    @property
    def seeds(self) -> TrialSeeds:
        """The seed of each source of randomness: init and order from ``seed`` (or the held
        value) plus ``seed_offset``; the data draw from ``data_seed`` plus ``seed`` (or the held
        value), without the offset (a null control trains on the reference's data)."""
        levels = seed_levels(self.seed_sources, self.seed)
        return TrialSeeds(init=levels["init"] + self.seed_offset,
                          order=levels["order"] + self.seed_offset,
                          data=self.data.data_seed + levels["data"])

    @property
    def own_code(self) -> Any:
        """The training function or command this trial runs (ablations/config/code.py); None
        for the built-in model and model plugins."""
        code = load_plugin(self.plugin)
        return code if is_own_code(code) else None

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values: what Ray and experiment.json carry."""
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """One value per user key, as trials.parquet's columns: the identity, ``model`` (the
        plugin, "" = built-in), then the data, model, optim and systems fields."""
        row: dict[str, Any] = {"ablation": self.ablation, "dataset": self.dataset,
                               "seed": self.seed,
                               "seed_offset": self.seed_offset,
                               "seed_sources": self.seed_sources, "model": self.plugin}
        if self.own_code is not None:  # the runner's data and optim keys do not apply
            return {**row, **dataclasses.asdict(self.model),
                    **{key: getattr(self.systems, key) for key in OWN_CODE_SWITCHES}}
        for section in (self.data, self.model, self.optim, self.systems):
            row.update(dataclasses.asdict(section))
        return row

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrialConfig":
        """Rebuild from :meth:`to_dict` output (nested: one mapping per section)."""
        plugin = str(values["plugin"])
        return cls(
            ablation=values["ablation"], dataset=values.get("dataset", ""), seed=values["seed"],
            seed_offset=values["seed_offset"],
            seed_sources=values["seed_sources"], plugin=plugin,
            data=DataConfig(**values["data"]), model=plugin_config(plugin, values["model"]),
            optim=OptimConfig(**values["optim"]), systems=SystemsConfig(**values["systems"]),
        )

    def replace(self, **changes: Any) -> "TrialConfig":
        """A copy with flat keys changed (``config.replace(lr=1e-3, compile="default")``)."""
        return apply_overrides(self, changes, source="override")

    def diff(self, other: "TrialConfig") -> dict[str, Any]:
        """Keys whose value differs from ``other``'s, with this config's values."""
        mine, theirs = self.flat(), other.flat()
        return {k: v for k, v in mine.items() if theirs.get(k, _MISSING) != v}


_MISSING = object()


def config_from_sources(
    *, yaml_path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
    base: TrialConfig | None = None,
) -> TrialConfig:
    """Defaults, then a YAML file, then explicit overrides (flags), in that order."""
    config = base or TrialConfig()
    if yaml_path is not None:
        config = apply_overrides(config, load_yaml_overrides(yaml_path), source=str(yaml_path))
    if overrides:
        config = apply_overrides(config, overrides, source="command line")
    return config


__all__ = ["DEFAULT_SEED_SOURCES", "TrialConfig", "TrialSeeds", "config_from_sources"]
