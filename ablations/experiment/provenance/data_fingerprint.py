"""The data an experiment's trials train on, fingerprinted for the ``data`` block of
experiment.json's provenance (:func:`ablations.experiment.provenance.provenance.collect`): one
fingerprint per data source (:func:`data_source`). A file dataset: the files' sizes and
mtimes, the header of ``images.npy`` (shape, dtype), ``sha256`` of ``table.parquet`` and of
the bytes of :data:`IMAGE_SAMPLES` samples of ``images.npy`` picked with a fixed seed (plain
file reads of at most :data:`IMAGE_SAMPLE_MAX_BYTES` per sample, never the whole file). The
synthetic set: its spec and cache key (the generator's source and constants are part of the
key). Own code: the files its trials name that are not code
(:func:`~ablations.experiment.provenance.own_code_files.named_data`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from ablations.experiment.provenance.own_code_files import code_paths, named_data
from ablations.trial.loading import synthetic_spec

IMAGE_SAMPLES = 64  # samples of images.npy whose bytes are hashed
IMAGE_SAMPLE_MAX_BYTES = 1 << 18  # per sample: all of it, or 256 KiB at a seeded offset
SAMPLE_SEED = 0
_CHUNK = 1 << 20


def synthetic_key(spec: Any) -> str:
    """The synthetic set's cache key: its spec and the generator (``model/synthetic.py``)."""
    from ablations.model import synthetic

    return synthetic.synthetic_cache_key(spec)


OWN_CODE_SOURCE = "own code"  # the data_source of own code's trials


def data_source(config: Any) -> str:
    """What trials.parquet's ``data_source`` holds: the data directory, or
    ``synthetic:<cache key>``; ``own code`` for a training function or a command, which loads
    its data itself."""
    if config.own_code is not None:
        return OWN_CODE_SOURCE
    return config.data.data_dir or f"synthetic:{synthetic_key(synthetic_spec(config))}"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sampled_indices(count: int, samples: int = IMAGE_SAMPLES, seed: int = SAMPLE_SEED
                    ) -> np.ndarray:
    """The samples of an ``images.npy`` of ``count`` samples whose bytes are hashed, sorted."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(count, size=min(samples, count), replace=False))


def file_data_fingerprint(directory: Path | str, *, samples: int = IMAGE_SAMPLES,
                          seed: int = SAMPLE_SEED,
                          max_bytes_per_sample: int = IMAGE_SAMPLE_MAX_BYTES) -> dict[str, Any]:
    """Fingerprint of a data directory (``images.npy``, ``table.parquet``) without reading the
    images whole: see the module docstring. ``fingerprint`` is a short hash of every compared
    field.

    Raises:
        OSError, ValueError: when a file is missing or not a .npy array.
    """
    root = Path(directory)
    images_path, table_path = root / "images.npy", root / "table.parquet"
    files = {}
    for path in (images_path, table_path):
        stat = path.stat()
        files[path.name] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    array = np.load(images_path, mmap_mode="r")  # the header only; no data is read
    shape, dtype, offset = tuple(int(s) for s in array.shape), array.dtype, int(array.offset)
    nbytes = int(array.nbytes)
    del array
    count = shape[0] if shape else 0
    picked = sampled_indices(count, samples, seed) if count else np.array([], dtype=int)
    sample_bytes = nbytes // count if count else 0
    rng = np.random.default_rng(seed + 1)
    digest = hashlib.sha256()
    with open(images_path, "rb") as handle:
        for index in picked:
            start, length = offset + int(index) * sample_bytes, sample_bytes
            if sample_bytes > max_bytes_per_sample:  # a window of the sample, item-aligned
                items = (sample_bytes - max_bytes_per_sample) // dtype.itemsize
                start += int(rng.integers(0, items + 1)) * dtype.itemsize
                length = max_bytes_per_sample
            handle.seek(start)
            digest.update(int(index).to_bytes(8, "little") + handle.read(length))
    compared = {
        "sizes": {name: item["bytes"] for name, item in files.items()},
        "images": {"shape": list(shape), "dtype": dtype.str, "samples": len(picked),
                   "sample_sha256": digest.hexdigest()},
        "table_sha256": _sha256_file(table_path),
    }
    return {"kind": "files", "directory": str(root), "files": files,
            "images": compared["images"], "table_sha256": compared["table_sha256"],
            "fingerprint": short_hash(compared)}


def synthetic_fingerprint(config: Any) -> dict[str, Any]:
    spec = synthetic_spec(config)
    key = synthetic_key(spec)
    return {"kind": "synthetic", "spec": asdict(spec), "key": key, "fingerprint": key}


def data_fingerprints(configs: Iterable[Any], own_code: Optional[dict[str, Any]] = None
                      ) -> dict[str, dict[str, Any]]:
    """One fingerprint per distinct data source of ``configs``, by :func:`data_source`.
    ``own_code``: their own_code_record, when the caller has it (its files are code, not
    data; else named_data walks the folder for them)."""
    out: dict[str, dict[str, Any]] = {}
    configs = list(configs)
    for config in configs:
        source = data_source(config)
        if source == OWN_CODE_SOURCE:
            if source not in out:  # the files its trials name (own_code_files.named_data)
                named = named_data(configs, code=code_paths(own_code))
                out[source] = {"kind": OWN_CODE_SOURCE, **named,
                               "fingerprint": short_hash(named["files"]) if named["files"]
                               else None}
        elif source not in out:
            out[source] = (file_data_fingerprint(config.data.data_dir) if config.data.data_dir
                           else synthetic_fingerprint(config))
    return out


def short_hash(value: Any) -> str:
    """16 hex of the sha256 of ``value`` as JSON with sorted keys."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
