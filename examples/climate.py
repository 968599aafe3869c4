"""A real dataset for ``--data``: the Met Office climate-model output in ``iris-sample-data``.

``iris-sample-data`` (UK Open Government Licence) ships, among the files of the Iris examples,
two runs of the Met Office Unified Model (version 6.05), ``E1_north_america.nc`` and
``A1B_north_america.nc``: annual means of near-surface (1.5 m) air temperature in kelvin, 240
years (1860-2099, a 360-day calendar) on a 37 x 49 grid over North America (15-60 N, 135-45 W).
They are one historical run up to 1999 and two emission scenarios from 2000 (E1: with mitigation,
SRES A1B: without). The files are netCDF-4 (HDF5), read here with h5netcdf (on h5py).

This script writes them as the runner's file dataset (docs/data.md)::

    pip install -e ".[climate]"
    python examples/climate.py OUT_DIR
    python run_ablations.py --space components --data OUT_DIR

``--scenario E1`` or ``--scenario A1B`` writes one scenario's samples only (the default,
``both``, writes both): two datasets from one source, for an experiment across datasets.

One sample per scenario and target year ``y`` (1864-2099): the fields of the ``T`` years before
it (``y-T .. y-1``, oldest first; ``T = 4`` by default) as ``images.npy`` ``(N, T, 1, 37, 49)``
float32, and in ``table.parquet``:

- ``target``: the area-weighted (cos latitude) mean temperature of year ``y`` over the grid, in
  kelvin (the runner labels errors "km": here they are kelvin, the same as degrees Celsius);
- ``scalar_year`` (``y``) and ``scalar_a1b`` (1 for A1B, 0 for E1; the runner standardises
  scalars on the training split). One scenario's dataset has no ``scalar_a1b``: it would be
  constant, nothing for a model to read, and the ``features`` space would ablate it;
- ``split`` by target year, the same in both scenarios: train up to 2039, val 2040-2069, test
  2070-2099, so every training target precedes every val target, and every val target every
  test target (a val or test sample's input frames may be earlier years: the past is known);
- strata kept for analysis: ``scenario`` (``E1``/``A1B``) and ``year``.

The images are anomalies: each field minus the per-grid-point mean of the training years'
fields (1860-2039, both scenarios), divided by those anomalies' standard deviation (one number),
so nothing of the val or test years enters them. The two scenarios share the years up to 1999,
so the samples with target years up to 1999 appear twice, identical but for ``scalar_a1b`` and
the ``scenario`` stratum; all of them are training samples.

One scenario's dataset takes its climatology and scale from its own training years only
(1860-2039 of that scenario): a dataset is normalised from nothing but its own training
samples, as the runner does, so it is the same whether or not the other scenario's file is at
hand, and its samples of the shared years up to 1999 match the other scenario's dataset but for
the normalisation (2000-2039 differ between the scenarios, so their climatologies and scales
differ a little).

The package's monthly Southern Oscillation Index (``SOI_Darwin.nc``) is not used: it is observed
(1866-2013), while the temperatures are a free-running model whose internal variability is not
in phase with the real one, and it covers neither 1860-1865 nor the scenario years after 2013.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCENARIOS = ("E1", "A1B")  # scalar_a1b = index
BOTH = "both"  # --scenario: every scenario in one dataset
FRAMES = 4  # past years per sample
FIRST_YEAR = 1860  # of the files' 240 annual fields
LAST_TRAIN_YEAR = 2039  # target years: train <= 2039 < val <= 2069 < test
LAST_VAL_YEAR = 2069
HOURS_PER_YEAR = 24 * 360  # the files' 360-day calendar
TARGETS = ("level", "change")  # the regional mean of year y, or its change from year y-1


def read_scenario(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(years, fields in kelvin (Y, 37, 49) float64, latitudes) of one ``*_north_america.nc``."""
    import h5netcdf  # the climate extra

    with h5netcdf.File(path, "r") as nc:
        temperature = nc.variables["air_temperature"]
        units = temperature.attrs["units"]
        units = units.decode() if isinstance(units, bytes) else str(units)
        if units != "K" or temperature.dimensions != ("time", "latitude", "longitude"):
            raise ValueError(f"{path}: expected air_temperature (time, latitude, longitude) in "
                             f"K, got {temperature.dimensions} in {units}")
        fields = np.asarray(temperature[:], dtype=np.float64)
        time = nc.variables["time"]
        if str(time.attrs["calendar"]) != "360_day" or not str(time.attrs["units"]).startswith(
                "hours since 1970-01-01"):
            raise ValueError(f"{path}: unexpected time axis {dict(time.attrs)}")
        # Each annual mean runs December to November; its middle is in the year it is named by.
        years = np.floor(1970 + np.asarray(time[:]) / HOURS_PER_YEAR).astype(np.int64)
        latitudes = np.asarray(nc.variables["latitude"][:], dtype=np.float64)
    if not np.array_equal(years, np.arange(years[0], years[0] + len(years))):
        raise ValueError(f"{path}: the years are not consecutive: {years[:3]}...{years[-3:]}")
    if not np.isfinite(fields).all():
        raise ValueError(f"{path}: NaN or inf in air_temperature")
    return years, fields, latitudes


def convert(out_dir: str | Path, *, source: str | Path | None = None,
            frames: int = FRAMES, target: str = "level",
            scenario: str = BOTH) -> tuple[tuple[int, ...], int]:
    """Write ``images.npy`` and ``table.parquet`` to ``out_dir`` from the netCDF files in
    ``source`` (default: the installed ``iris_sample_data``); return (images shape, rows).

    ``scenario``: ``E1`` or ``A1B``, that scenario's samples only, normalised on its own
    training years and without ``scalar_a1b``; ``both`` (default), both scenarios'.

    ``target``: ``level``, year ``y``'s regional mean (K); or ``change``, that mean minus year
    ``y-1``'s (K): the forecast relative to persistence, whose errors are the level forecast's
    (persistence + predicted change) to the last digit, and whose mean predictor is about
    persistence (the training years' mean change)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if scenario not in (*SCENARIOS, BOTH):
        raise ValueError(f"scenario must be one of {', '.join((*SCENARIOS, BOTH))}, got "
                         f"{scenario!r}")
    chosen = SCENARIOS if scenario == BOTH else (scenario,)
    if source is None:
        import iris_sample_data  # the climate extra

        source = iris_sample_data.path
    source = Path(source)
    runs = {name: read_scenario(source / f"{name}_north_america.nc") for name in chosen}
    years, _, latitudes = runs[chosen[0]]
    for name, (other_years, fields, other_lat) in runs.items():
        if not (np.array_equal(other_years, years) and np.array_equal(other_lat, latitudes)):
            raise ValueError(f"{name}: years or latitudes differ from {chosen[0]}'s")
    if not 1 <= frames < len(years):
        raise ValueError(f"frames must be 1..{len(years) - 1}, got {frames}")

    weights = np.cos(np.deg2rad(latitudes))[:, None] * np.ones(runs[chosen[0]][1].shape[2])
    weights /= weights.sum()
    # Anomalies against the training years only (the fields of years <= LAST_TRAIN_YEAR) of
    # the scenarios written: a dataset is normalised from its own training samples.
    train_fields = np.concatenate([fields[years <= LAST_TRAIN_YEAR]
                                   for _, fields, _ in runs.values()])
    climatology = train_fields.mean(axis=0)
    scale = (train_fields - climatology).std()

    images, rows = [], []
    for name in chosen:
        _, fields, _ = runs[name]
        anomalies = ((fields - climatology) / scale).astype(np.float32)
        regional_mean = (fields * weights).sum(axis=(1, 2))
        for t in range(frames, len(years)):
            year = int(years[t])
            images.append(anomalies[t - frames : t, None])  # (T, 1, H, W), oldest first
            split = ("train" if year <= LAST_TRAIN_YEAR else
                     "val" if year <= LAST_VAL_YEAR else "test")
            value = regional_mean[t] - (regional_mean[t - 1] if target == "change" else 0.0)
            row = {"target": float(value), "scalar_year": float(year),
                   "scalar_a1b": float(SCENARIOS.index(name)), "split": split,
                   "scenario": name, "year": year}
            if len(chosen) == 1:  # constant within one scenario: not a feature
                del row["scalar_a1b"]
            rows.append(row)
    stack = np.stack(images)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "images.npy", stack)
    pq.write_table(pa.Table.from_pylist(rows), out / "table.parquet")
    return stack.shape, len(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="the data directory to write (images.npy, "
                        "table.parquet); then: python run_ablations.py --data OUT_DIR")
    parser.add_argument("--frames", type=int, default=FRAMES,
                        help=f"past years per sample (default {FRAMES})")
    parser.add_argument("--source", help="folder holding E1_north_america.nc and "
                        "A1B_north_america.nc (default: the installed iris_sample_data)")
    parser.add_argument("--target", choices=TARGETS, default="level",
                        help="level: next year's regional mean (K, default); change: its "
                        "change from the last year (K), a forecast relative to persistence")
    parser.add_argument("--scenario", choices=(*SCENARIOS, BOTH), default=BOTH,
                        help="write one scenario's samples only (normalised on its own "
                        "training years, no scalar_a1b), or both (default): two datasets "
                        "from one source for an experiment across datasets")
    args = parser.parse_args(argv)
    shape, rows = convert(args.out_dir, source=args.source, frames=args.frames,
                          target=args.target, scenario=args.scenario)
    what = "regional mean temperature" if args.target == "level" else \
        "regional mean temperature minus this year's"
    print(f"{args.out_dir}: images.npy {shape} float32, table.parquet {rows} rows "
          f"(target: next year's {what}, K)")


if __name__ == "__main__":
    main()
