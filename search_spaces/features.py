"""The `features` space: leave-one-covariate-out, generated from the data's scalar columns.

One variant per scalar column, the model trained without it (``no_<column>``), plus
``no_images`` and the baseline they are compared with; every row runs at every seed, like
`components`. On the synthetic data the rows are ``no_scalar_0``, ``no_scalar_1`` (planted
signals) and ``no_scalar_2`` (pure noise: a known null, its effect should be none).
"""

from __future__ import annotations

from typing import Any, Sequence

from ablations.search_spaces.components import BASELINE


def feature_variants(scalar_names: Sequence[str], dropped: Sequence[str] = ()
                     ) -> dict[str, dict[str, Any]]:
    """The table for data with scalar columns ``scalar_names``.

    Args:
        scalar_names: the data's scalar columns, in the data's order.
        dropped: columns the base configuration already leaves out (its ``drop_scalars``):
            they get no row, and every row leaves them out as well.
    """
    kept = [name for name in scalar_names if name not in dropped]
    variants: dict[str, dict[str, Any]] = {BASELINE: {}}
    for name in kept:
        if len(kept) == 1:  # leaving out the only column left is training without scalars
            variants[f"no_{name}"] = {"use_scalars": False}
        else:
            variants[f"no_{name}"] = {"drop_scalars": ",".join([*dropped, name])}
    variants["no_images"] = {"use_images": False}  # scalars only, no CNN
    return variants
