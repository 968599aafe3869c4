"""When a trial's own numbers make it ``diverged``: the explosion rule (no torch, so the
schema and the analysis read the factor without loading it).

A non-finite loss is caught where it happens (``ablations/trial/loop.py`` ``evaluate``); the
explosion rule reads the final epoch: a validation MAE above :data:`EXPLOSION_FACTOR` times the
mean predictor's (the training targets' mean predicted for every sample) is a model that has
blown up, even if its loss stayed finite.
"""

from __future__ import annotations

from typing import Optional

# The factor, measured on the built-in model (docs/verdicts.md, "What counts as diverged"):
# trials at or below the mean predictor's level ended at most 1.03x its validation MAE, the
# mildest blow-up at 7.6x.
EXPLOSION_FACTOR = 3.0


def explosion_error(val_mae: float, val_mae_mean_predictor: float) -> Optional[str]:
    """The ``error`` line of a trial whose final validation MAE exceeds
    :data:`EXPLOSION_FACTOR` times the mean predictor's (the training loop then sets it
    ``diverged``), else None. A NaN MAE is no explosion here (a non-finite loss is caught on
    its own)."""
    if not val_mae > EXPLOSION_FACTOR * val_mae_mean_predictor:
        return None
    return (f"exploded: val MAE {val_mae:.3g} km > {EXPLOSION_FACTOR:g} x the mean "
            f"predictor's {val_mae_mean_predictor:.3g} km")
