"""The cells a plan adds to a space's table: ``--cross-seeds``' grid of two seed sources per
variant (:func:`crossed_seeds`), the null control (:func:`with_null_control`), and the one
cell of a search's base (:func:`spec_for`). Planning (ablations/experiment/prepare.py) calls
them before it validates the trials."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ablations.config import SEED_SOURCES, TrialConfig, parse_seed_sources
from ablations.experiment.core.request import UsageError, arg
from ablations.search_spaces import TrialSpec


def crossed_seeds(trials: list[Any], seeds: Sequence[int]) -> list[Any]:
    """``--cross-seeds``: per variant, a grid of two varying seed sources instead of its
    seeds (with all three varying, the default, init x order with the data draw held at seed 0):
    cell (i, j) holds the first source at ``seeds[i]`` and the second at ``seeds[j]``
    (``seed_sources=init=a,order=b``) and has the pairing seed ``i * len(seeds) + j``, the
    same cell for every variant. ``trials``: :func:`ablations.search_spaces.expand`'s,
    variant-major."""
    if len(seeds) < 3:  # results/stats/crossed.py: at 2 x 2 each source's mean square has 1 df
        raise UsageError(f"{arg('cross_seeds')} needs at least 3 seeds per source for verdicts "
                         f"(e.g. {arg('seeds')} 3: 3 x 3 trials per variant)")
    count, out, seen = len(seeds), [], set()
    for spec in trials:
        if spec.variant in seen:
            continue
        seen.add(spec.variant)
        tokens = spec.config.seed_sources.split(",")
        varying = [token for token in tokens if token in SEED_SOURCES]
        if len(varying) == 3:  # the default: cross init x order, the data draw held at seed 0
            varying, tokens = varying[:2], [*varying[:2], "data=0"]
        if len(varying) != 2:
            raise UsageError(f"{arg('cross_seeds')} crosses two seed sources; variant "
                             f"{spec.variant} varies {len(varying)} ({spec.config.seed_sources}): "
                             f"pick two with {arg('seed_sources')}, e.g. init,order")
        held = [token for token in tokens if token not in SEED_SOURCES]
        for i, first in enumerate(seeds):
            for j, second in enumerate(seeds):
                cell = parse_seed_sources(",".join(
                    [f"{varying[0]}={first}", f"{varying[1]}={second}", *held]))
                key = i * count + j
                config = spec.config.replace(seed=key, seed_sources=cell)
                out.append(dataclasses.replace(spec, name=f"{spec.variant}-seed{key}", seed=key,
                                               config=config))
    return out


def with_null_control(trials: list[Any], reference: str) -> list[Any]:
    """``trials`` plus ``<reference>_repeat``: the reference's trials with the training seed
    offset by 1000 (``seed_offset``), paired by ``seed``: a variant whose true effect is 0."""
    repeat = f"{reference}_repeat"
    if any(spec.variant == repeat for spec in trials):
        raise UsageError(f"{arg('null_control')}: the space already has a variant {repeat!r}")
    extra = [dataclasses.replace(spec, name=f"{repeat}-seed{spec.seed}", variant=repeat,
                                 config=spec.config.replace(ablation=repeat, seed_offset=1000))
             for spec in trials if spec.variant == reference]
    if not extra:
        raise UsageError(f"{arg('null_control')}: the reference {reference!r} is not among the "
                         f"variants to run (see {arg('only')})")
    return [*trials, *extra]


def spec_for(config: TrialConfig) -> Any:
    """The trial of ``config``, named as a table's cells are."""
    return TrialSpec(f"{config.ablation}-seed{config.seed}", config.ablation, config.seed, config)
