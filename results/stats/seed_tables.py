"""A table of one value per seed (rows) and variant (columns), as the analyses read trials."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

# Aggregations whose value for a cell of one row is that row's value.
_ONE_ROW_IS_ITSELF = ("mean", "max", "min")


def seed_table(frame: pd.DataFrame, values: str, aggfunc: str = "mean", *,
               index: str = "seed", columns: str = "ablation") -> pd.DataFrame:
    """``frame.pivot_table(index=index, columns=columns, values=values, aggfunc=aggfunc)``,
    cell for cell: NaN values skipped, a row or column with no value left out, index and
    columns sorted and named as pivot_table names them (an empty frame gives an empty
    table). The simulations that validate the verdicts call it per look: where every cell
    has at most one value (a grid of trials, each seed of each variant once), the values
    are placed by NumPy, a tenth of a group-by's time; otherwise a group-by and an unstack,
    a third of pivot_table's."""
    column = frame[values]
    if aggfunc in _ONE_ROW_IS_ITSELF and plain_float(column):
        v = column.to_numpy()
        keep = ~np.isnan(v)
        placed = cells(frame, keep, index=index, columns=columns)
        if placed is not None and placed.unique(keep):
            return placed.frame(placed.table(v, keep))
    table = frame.groupby([index, columns])[values].agg(aggfunc).unstack(columns)
    return table.dropna(how="all").dropna(axis=1, how="all")


def plain_float(column: pd.Series) -> bool:
    """Whether ``column`` holds NumPy floats (not an extension type such as Float64)."""
    return isinstance(column.dtype, np.dtype) and column.dtype.kind == "f"


class Cells:
    """The (index, columns) cells of a frame's chosen rows: the sorted keys, as a group-by
    sorts them, and each row's row and column position (-1 for a row not chosen)."""

    def __init__(self, frame: pd.DataFrame, chosen: np.ndarray, index: str, columns: str,
                 row_keys: np.ndarray, col_keys: np.ndarray, r: np.ndarray, c: np.ndarray):
        self.row_keys = pd.Index(row_keys, dtype=frame[index].dtype, name=index)
        self.col_keys = pd.Index(col_keys, dtype=frame[columns].dtype, name=columns)
        self.r, self.c = np.full(len(frame), -1), np.full(len(frame), -1)
        self.r[chosen], self.c[chosen] = r, c

    def unique(self, where: np.ndarray) -> bool:
        """Whether the rows ``where`` fall in distinct cells."""
        flat = self.r[where] * len(self.col_keys) + self.c[where]
        return np.unique(flat).size == flat.size

    def table(self, values: np.ndarray, where: np.ndarray, empty=np.nan) -> np.ndarray:
        """A cells-shaped array: ``values`` of the rows ``where`` (chosen rows only) in their
        cells, ``empty`` elsewhere."""
        out = np.full((len(self.row_keys), len(self.col_keys)), empty, dtype=values.dtype)
        out[self.r[where], self.c[where]] = values[where]
        return out

    def frame(self, table: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(table, index=self.row_keys, columns=self.col_keys)


def cells(frame: pd.DataFrame, chosen: np.ndarray, *, index: str = "seed",
          columns: str = "ablation") -> Optional[Cells]:
    """The :class:`Cells` of ``frame``'s ``chosen`` rows (a boolean mask); None where a key
    column is neither NumPy integers nor objects that are all strings (a group-by infers
    another type from objects of another kind, and sorts mixed ones its own way), or its
    keys do not sort, for a group-by to say what it makes of them."""
    keys = []
    for name in (index, columns):
        column = frame[name]
        if not isinstance(column.dtype, np.dtype) or column.dtype.kind not in "iuO":
            return None
        if column.dtype.kind == "O" and pd.api.types.infer_dtype(column, skipna=False) \
                not in ("string", "empty"):
            return None
        keys.append(column.to_numpy()[chosen])
    try:
        row_keys, r = np.unique(keys[0], return_inverse=True)
        col_keys, c = np.unique(keys[1], return_inverse=True)
    except TypeError:
        return None
    return Cells(frame, chosen, index, columns, row_keys, col_keys, r, c)
