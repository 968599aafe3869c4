"""The runner's cache folder: results that cost seconds to compute and are the same every time
for the same inputs (the synthetic sets, the group-sequential levels, the built-in model's
FLOPs), kept between processes. ``$ABLATION_CACHE_DIR``, else ~/.cache/ablation-runner;
deleting it only costs computing them again.

:func:`read_record` and :func:`keep_record` keep a JSON value under a key (a JSON object of
everything the value depends on): the file is named by the key's digest and holds the key, so
a file of another key, or one cut short, reads as missing."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

CACHE_DIR_ENV = "ABLATION_CACHE_DIR"


def cache_dir() -> Path:
    """Where the cache is: $ABLATION_CACHE_DIR, else ~/.cache/ablation-runner."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "ablation-runner")


def source_digest(*paths: str | Path, extra: str = "") -> str:
    """A key's digest of code: the bytes of ``paths`` and ``extra`` (e.g. a function's source),
    so an edit of any of them reads as another key."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    digest.update(extra.encode())
    return digest.hexdigest()[:16]


def record_path(kind: str, key: dict[str, Any]) -> Path:
    """The file that keeps ``kind``'s value for ``key``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / f"{kind}-{digest}.json"


def read_record(kind: str, key: dict[str, Any]) -> Optional[Any]:
    """The value kept for ``key``; None when there is none, or the file is not whole or holds
    another key."""
    try:
        record = json.loads(record_path(kind, key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or "value" not in record:
        return None
    return record["value"]


def keep_record(kind: str, key: dict[str, Any], value: Any) -> None:
    """Keep ``value`` for ``key``: written whole, then renamed (a reader never sees part of
    it); a folder that cannot be written keeps nothing."""
    path = record_path(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "value": value}))
        os.replace(partial, path)
    except OSError:
        pass
