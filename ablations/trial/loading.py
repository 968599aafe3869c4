"""A trial's data as the trial reads it: the synthetic set its config draws, loaded with the
trial's caps and without its dropped scalar columns. No torch here: the driver plans and
fingerprints with these, and does not import torch (ablations/trial/batches.py turns the data
into batches)."""

from __future__ import annotations

from ablations.config import TrialConfig
from ablations.model.data import (
    SYNTHETIC_SCALARS,
    DataError,
    RegressionData,
    SyntheticSpec,
    cap_split,
    check_directory,
    load_directory,
    load_synthetic,
)


def synthetic_spec(config: TrialConfig) -> SyntheticSpec:
    """The synthetic set a trial config trains on (without ``data_dir``): drawn with the
    trial's data seed (``config.seeds.data``)."""
    return SyntheticSpec(n_train=config.data.synthetic_train, n_val=config.data.synthetic_val,
                         n_test=config.data.synthetic_test, seed=config.seeds.data)


def scalar_columns(config: TrialConfig) -> list[str]:
    """The scalar column names of the trial's data, all of them (``drop_scalars`` not applied),
    from the files' headers: no data is loaded."""
    if not config.data.data_dir:
        return [f"scalar_{i}" for i in range(SYNTHETIC_SCALARS)]
    _, columns = check_directory(config.data.data_dir)
    return [c for c in columns if c.startswith("scalar_")]  # as load_directory reads them


def drop_scalar_columns(data: RegressionData, config: TrialConfig) -> RegressionData:
    """``data`` without the scalar columns in ``config.data.drop_scalars`` (in place): every
    consumer (normalisation, batches, the model's ``num_scalars``) then sees the kept ones."""
    if not config.data.drop_scalars:
        return data
    unknown = [n for n in config.data.dropped_scalars if n not in data.scalar_names]
    if unknown:
        raise DataError(f"drop_scalars: {data.source} has no scalar column {unknown[0]!r}; "
                        f"its scalar columns: {', '.join(data.scalar_names) or 'none'}")
    keep = [i for i, n in enumerate(data.scalar_names) if n not in config.data.dropped_scalars]
    data.scalars = data.scalars[:, keep]
    data.scalar_names = [data.scalar_names[i] for i in keep]
    return data


def load_data(config: TrialConfig) -> RegressionData:
    """The trial's data with its caps applied (capped-out samples get split '') and without
    the scalar columns in ``drop_scalars``."""
    data_seed = config.seeds.data  # data_seed, + the trial's seed when the data varies
    if config.data.data_dir:
        data = load_directory(config.data.data_dir, split_seed=data_seed)
    else:
        data = load_synthetic(synthetic_spec(config))
    data = drop_scalar_columns(data, config)
    split = data.split
    section = config.data
    if section.max_train_examples:
        split = cap_split(split, "train", section.max_train_examples, seed=data_seed)
    if section.max_eval_examples:
        for name in ("val", "test"):
            split = cap_split(split, name, section.max_eval_examples, seed=data_seed + 1)
    data.split = split
    return data
