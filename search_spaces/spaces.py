"""Spaces as data, and their expansion into trials. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ablations.config import ConfigError, TrialConfig, apply_overrides
from ablations.config.values import arg
from ablations.search_spaces.files import is_space_file, load_space_file
from ablations.search_spaces.components import BASELINE, COMPONENT_ABLATIONS
from ablations.search_spaces.features import feature_variants
from ablations.search_spaces.hpo import HPO_SEARCH
from ablations.search_spaces.sweeps import (
    BATCH_SWEEP,
    FRAMES_SWEEP,
    SYSTEMS_MATRIX,
    SYSTEMS_REFERENCE,
)


@dataclass(frozen=True)
class Space:
    """A named table of variants, each a diff against the base configuration."""

    name: str
    description: str
    variants: Mapping[str, Mapping[str, Any]]
    reference: str = BASELINE  # the variant the others are compared with
    # True: a cell that cannot run here (a switch conflict on the device, more frames than the
    # data has) is skipped with its reason; False: it is an error before anything runs.
    skip_invalid: bool = False
    # Each trial in a fresh worker process, so its peak memory is its own (costs a process
    # start per trial); else worker processes are reused across trials.
    isolate_trials: bool = False
    # A search (field -> (kind, args)) instead of a table: sampled trials, schedulers allowed.
    search: Mapping[str, tuple[str, Any]] | None = None
    # A table generated from the data: (the data's scalar column names, the columns the base
    # already drops) -> variants. Then ``variants`` is empty; see :meth:`table`.
    variants_from_data: Callable[[Sequence[str], Sequence[str]],
                                 Mapping[str, Mapping[str, Any]]] | None = None
    # A table read from a YAML file (search_spaces/files.py): its path, and the model plugin
    # it names (``model:``), if any.
    source_file: str = ""
    model: str = ""
    # A space file's datasets (docs/datasets.md): name -> a directory, "synthetic" or the keys
    # that select it; None: the experiment's one dataset
    datasets: Mapping[str, Any] | None = None
    # A space file's ``time_limit:`` in seconds: each run of a trial ends past it (timeout)
    time_limit_s: float | None = None

    @property
    def is_search(self) -> bool:
        return self.search is not None

    def table(self, scalar_names: Sequence[str] | None = None, dropped: Sequence[str] = ()
              ) -> Mapping[str, Mapping[str, Any]]:
        """The variants; a space generated from the data needs the data's ``scalar_names``
        (all its scalar columns) and the columns the base configuration ``dropped``."""
        if self.variants_from_data is None:
            return self.variants
        if scalar_names is None:
            raise ConfigError(f"space {self.name} is generated from the data's scalar columns; "
                              "pass scalar_names")
        return {**self.variants, **self.variants_from_data(scalar_names, dropped)}


@dataclass(frozen=True)
class TrialSpec:
    """One trial of an experiment: a variant of a space at one seed."""

    name: str  # unique within the experiment, e.g. "no_images-seed1"
    variant: str
    seed: int
    config: TrialConfig


SPACES: dict[str, Space] = {
    "components": Space(
        name="components",
        description="the full model and eight component ablations, each over every seed",
        variants=COMPONENT_ABLATIONS,
    ),
    "features": Space(
        name="features",
        description="leave-one-covariate-out: one variant per scalar column of the data "
        "(no_<column>), and no_images, each over every seed",
        variants={},
        variants_from_data=feature_variants,
    ),
    "systems": Space(
        name="systems",
        description="gradient_checkpointing x compile mode x precision; unsafe cells skipped",
        variants=SYSTEMS_MATRIX,
        reference=SYSTEMS_REFERENCE,
        skip_invalid=True,
        isolate_trials=True,
    ),
    "batch": Space(
        name="batch",
        description="batch sizes 4..64; learning rate per lr_scaling (fixed/linear/sqrt)",
        variants=BATCH_SWEEP,
        reference="batch32",
    ),
    "frames": Space(
        name="frames",
        description="temporal_frames 1..8 (the most recent frames; beyond the data's T skipped)",
        variants=FRAMES_SWEEP,
        reference="frames4",
        skip_invalid=True,
    ),
    "hpo": Space(
        name="hpo",
        description="Optuna TPE over lr, weight decay, dropout, widths, embed dim, batch size; "
        "ASHA early stopping; --num-samples trials",
        variants={},
        reference="",
        search=HPO_SEARCH,
    ),
}


def get_space(name: str) -> Space:
    """The space called ``name``, or the table in the YAML file ``name`` names
    (search_spaces/files.py); a ``ConfigError`` lists the valid names otherwise."""
    if is_space_file(name):
        table = load_space_file(name)
        if table["name"] in SPACES:
            raise ConfigError(f"{name}: name {table['name']!r} is a built-in space's; choose "
                              "another name: in the file")
        return Space(name=table["name"], description=table["description"],
                     variants=table["variants"], reference=table["reference"],
                     source_file=table["path"], model=table["model"],
                     datasets=table["datasets"], time_limit_s=table["time_limit_s"])
    try:
        return SPACES[name]
    except KeyError:
        raise ConfigError(
            f"unknown space {name!r}; choose one of: {', '.join(sorted(SPACES))}"
        ) from None


def expand(
    space: Space,
    base: TrialConfig,
    seeds: Sequence[int],
    *,
    only: Sequence[str] | None = None,
    scalar_names: Sequence[str] | None = None,
) -> list[TrialSpec]:
    """Every variant of ``space`` (or those in ``only``) at every seed, variant-major.

    Each variant's diff is applied to ``base`` and validated here, so a bad cell fails before
    any trial starts. A space generated from the data (``features``) needs the data's
    ``scalar_names`` (``ablations.trial.loading.scalar_columns(base)``).
    """
    if not seeds:
        raise ConfigError(f"no seeds given; pass {arg('seeds')} N (>= 1) or a list like 0,1,2")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {list(seeds)}")
    table = space.table(scalar_names, base.data.dropped_scalars)
    names = list(table)
    if only:
        unknown = [n for n in only if n not in table]
        if unknown:
            raise ConfigError(
                f"unknown variant(s) {unknown} in space {space.name!r}; "
                f"choose from: {', '.join(names)}"
            )
        names = [n for n in names if n in only]
    trials = []
    for variant in names:
        diff = {**table[variant], "ablation": variant}
        where = space.source_file or f"space {space.name}"
        configured = apply_overrides(base, diff, source=f"{where}, variant {variant}")
        for seed in seeds:
            config = apply_overrides(configured, {"seed": seed}, source=f"variant {variant}")
            trials.append(TrialSpec(f"{variant}-seed{seed}", variant, int(seed), config))
    return trials
