"""Spaces as data, and their expansion into trials. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ablations.config import ConfigError, TrialConfig, apply_overrides
from search_spaces.components import BASELINE, COMPONENT_ABLATIONS
from search_spaces.hpo import HPO_SEARCH
from search_spaces.sweeps import BATCH_SWEEP, FRAMES_SWEEP, SYSTEMS_MATRIX, SYSTEMS_REFERENCE


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

    @property
    def is_search(self) -> bool:
        return self.search is not None


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
    """The space called ``name``; a ``ConfigError`` lists the valid names otherwise."""
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
) -> list[TrialSpec]:
    """Every variant of ``space`` (or those in ``only``) at every seed, variant-major.

    Each variant's diff is applied to ``base`` and validated here, so a bad cell fails before
    any trial starts.
    """
    if not seeds:
        raise ConfigError("no seeds given; pass --seeds N (>= 1) or a list like 0,1,2")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {list(seeds)}")
    names = list(space.variants)
    if only:
        unknown = [n for n in only if n not in space.variants]
        if unknown:
            raise ConfigError(
                f"unknown variant(s) {unknown} in space {space.name!r}; "
                f"choose from: {', '.join(names)}"
            )
        names = [n for n in names if n in only]
    trials = []
    for variant in names:
        diff = {**space.variants[variant], "ablation": variant}
        configured = apply_overrides(base, diff, source=f"space {space.name}, variant {variant}")
        for seed in seeds:
            config = apply_overrides(configured, {"seed": seed}, source=f"variant {variant}")
            trials.append(TrialSpec(f"{variant}-seed{seed}", variant, int(seed), config))
    return trials
