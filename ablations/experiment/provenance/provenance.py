"""Provenance: what an experiment needs to be trusted and repeated, and whether a resume would
mix two different experiments. Pure functions over the file system and git; no Ray.

:func:`collect` builds the ``provenance`` block of ``experiment.json``:

- ``code``: ``sha256`` of the runner's source (every ``.py`` file of its packages,
  :func:`runner_source`, by import path and content), the same in a git checkout or not;
- ``own_code``: the researcher's code a command or a training function runs, file by file
  (:mod:`ablations.experiment.provenance.own_code_files`); null for the built-in model and plugins;
- ``git``: ``commit``, ``dirty`` (tracked files differ from the commit, staged or not),
  ``diff_sha256`` (of the bytes of ``git diff HEAD --binary``; null when clean) and
  ``untracked`` (names of untracked files git does not ignore; their contents are not read,
  they may be large: an untracked source file is covered by ``code``); null outside git;
- ``packages``: Python and the packages that matter (:data:`KEY_PACKAGES`);
  ``environment``: every installed distribution with its version (a freeze);
- ``device``: the driver's: CUDA device name and compute capability when CUDA is available, else
  the CPU model (the trials report their own in ``device_name``);
- ``data``: one fingerprint per data source
  (:func:`~ablations.experiment.provenance.data_fingerprint.data_source`): a file dataset's sizes,
  header and sampled bytes, the synthetic set's spec and cache key, own code's named files
  (:mod:`ablations.experiment.provenance.data_fingerprint`).

:func:`changes` compares a recorded block with the current one: a change of the code (the
runner's or the researcher's, naming the files) or of the data blocks a resume
(``--allow-changed`` overrides); other differences (package versions, device, git commit) are
reported only. Not compared: mtimes (a copy of the same bytes is the
same data) and the commit as such (a commit that changes only docs or tests changes no code
that runs; one that changes code changes ``code``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Optional

from ablations.config.safety import cpu_only_torch
from ablations.experiment.provenance.data_fingerprint import (
    OWN_CODE_SOURCE,
    data_fingerprints,
    data_source,
    short_hash,
)
from ablations.experiment.provenance.data_fingerprint import (  # noqa: F401 (re-exported)
    IMAGE_SAMPLES,
    file_data_fingerprint,
    sampled_indices,
)
from ablations.experiment.provenance.own_code_files import (
    combined_fingerprint,
    config_words,
    named_data_change,
    own_code_change,
    own_code_record,
)
from ablations.trial.host import cpu_model

KEY_PACKAGES = ("torch", "ray", "numpy", "pandas", "pyarrow", "optuna", "scipy")
_GIT_TIMEOUT_S = 10
# The runner's packages, by import name (pyproject.toml installs them under one root)
RUNNER_PACKAGES = ("ablations", "ablations.model", "ablations.results", "ablations.search_spaces")


# ------------------------------------------------------------------------------------- code


def runner_source() -> dict[str, Path]:
    """Each of the runner's packages -> the folder it is imported from: in a checkout,
    ablations/, model/, results/ and search_spaces/ side by side; in an installed wheel,
    ablations/ with the others inside it."""
    found = {}
    for name in RUNNER_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        found[name] = Path(list(spec.submodule_search_locations)[0]).resolve()
    return found


def checkout_root() -> Optional[Path]:
    """The checkout the runner is imported from (the folder that holds its packages side by
    side and its pyproject.toml); None for an installed copy."""
    folders = runner_source()
    root = folders["ablations"].parent
    if (root / "pyproject.toml").is_file() and all(
            folder.parent == root for folder in folders.values()):
        return root
    return None


def code_fingerprint(folders: Optional[dict[str, Path]] = None) -> Optional[str]:
    """sha256 over the ``.py`` files of ``folders`` (import name -> folder; default: the
    runner's, :func:`runner_source`), each by its import path and bytes, in sorted order; a
    folder inside another is counted once, under its own name. None when no file is found."""
    folders = runner_source() if folders is None else folders
    entries: dict[str, Path] = {}
    for name, folder in folders.items():
        folder = Path(folder)
        if not folder.is_dir():
            continue
        others = [Path(other) for other in folders.values()
                  if Path(other) != folder and Path(other).is_relative_to(folder)]
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts or any(path.is_relative_to(o) for o in others):
                continue
            key = "/".join(name.split(".")) + "/" + path.relative_to(folder).as_posix()
            entries[key] = path
    if not entries:
        return None
    digest = hashlib.sha256()
    for key in sorted(entries):
        digest.update(key.encode() + b"\0")
        digest.update(entries[key].read_bytes() + b"\0")
    return digest.hexdigest()


def _git(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                          timeout=_GIT_TIMEOUT_S, check=True).stdout


def git_state(root: Optional[Path | str]) -> Optional[dict[str, Any]]:
    """Commit, dirty flag, hash of the diff and untracked files of the checkout at ``root``;
    None when ``root`` is None or not the top of a git checkout (an installed copy inside some
    other repository must not report that repository's commit)."""
    if root is None:
        return None
    root = Path(root).resolve()
    try:
        top = _git(root, "rev-parse", "--show-toplevel").decode().strip()
        if Path(top).resolve() != root:
            return None
        commit = _git(root, "rev-parse", "HEAD").decode().strip()
        diff = _git(root, "diff", "HEAD", "--binary")
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted(name for name in untracked.decode(errors="replace").split("\0") if name)
    return {
        "commit": commit,
        "dirty": bool(diff),
        "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
        "untracked": names[:100],
        "untracked_count": len(names),
    }


def git_commit_label(state: Optional[dict[str, Any]]) -> Optional[str]:
    """The commit as trials.parquet's ``git_commit`` shows it: ``<sha>`` or ``<sha>-dirty``."""
    if state is None:
        return None
    return f"{state['commit']}-dirty" if state["dirty"] else state["commit"]


# ------------------------------------------------------------------------ packages, device


def package_versions(names: Iterable[str] = KEY_PACKAGES) -> dict[str, Optional[str]]:
    """``python`` and each package's installed version (None if not installed)."""
    versions: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def package_freeze() -> dict[str, str]:
    """Every installed distribution and its version, by lower-case name."""
    out = {}
    for dist in importlib.metadata.distributions():
        metadata = dist.metadata  # parsed on each access: once per distribution
        if metadata["Name"]:
            out[metadata["Name"].lower()] = metadata["Version"]
    return dict(sorted(out.items()))


def device_info() -> dict[str, Any]:
    """The driver's device: CUDA device names and capabilities, or the CPU model (torch is not
    imported for a CPU-only build)."""
    info: dict[str, Any] = {"cpu": cpu_model(), "hostname": platform.node(),
                            "cuda_available": False}
    if cpu_only_torch():
        return info
    import torch

    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["cuda"] = [
            {"name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())
        ]
        info["cuda_runtime"] = torch.version.cuda
    return info


# -------------------------------------------------------------------------- all, compare


def collect(configs: Iterable[Any]) -> dict[str, Any]:
    """The provenance block of ``experiment.json`` for trials with ``configs``."""
    git = git_state(checkout_root())
    configs = list(configs)
    own = own_code_record(configs)  # own_code_files.py: the researcher's files
    return {
        "code": {"sha256": code_fingerprint(), "paths": list(RUNNER_PACKAGES)},
        "own_code": own,
        "git": git,
        "packages": package_versions(),
        "environment": package_freeze(),
        "device": device_info(),
        "data": data_fingerprints(configs, own),
    }


def trial_columns(provenance: Optional[dict[str, Any]], config: Any) -> dict[str, Any]:
    """trials.parquet's provenance columns for one trial: ``data_source``,
    ``data_fingerprint``, ``code_fingerprint``."""
    provenance = provenance or {}
    source = data_source(config)
    data = (provenance.get("data") or {}).get(source) or {}
    fingerprint = data.get("fingerprint")
    if source == OWN_CODE_SOURCE:  # the files this trial's own words name (named_data)
        files, words = data.get("files") or {}, data.get("words") or {}
        mine = {words[word]: files.get(words[word]) for word in config_words(config)
                if word in words}
        fingerprint = short_hash(mine) if mine else None
    return {"data_source": source, "data_fingerprint": fingerprint,
            "code_fingerprint": run_code_label(provenance)}


def run_code_label(provenance: Optional[dict[str, Any]]) -> Optional[str]:
    """The code a run of the experiment trains with, as trials.parquet's ``code_fingerprint``:
    the runner's source and the researcher's own code together
    (:func:`~ablations.experiment.provenance.own_code_files.combined_fingerprint`)."""
    provenance = provenance or {}
    return combined_fingerprint((provenance.get("code") or {}).get("sha256"),
                                (provenance.get("own_code") or {}).get("sha256"))


def changes(recorded: Optional[dict[str, Any]], current: dict[str, Any]
            ) -> tuple[list[str], list[str]]:
    """What differs between a recorded provenance block and the current one.

    Returns:
        (blocking, notes): each a list of short phrases. ``blocking``: the code that runs or a
        data source's fingerprint changed (a resume would mix two experiments). ``notes``:
        other differences (git commit or diff, package versions, device). Both empty when
        nothing was recorded (an experiment from before provenance was kept).
    """
    if not recorded:
        return [], []
    blocking, notes = [], []
    old_code = (recorded.get("code") or {}).get("sha256")
    new_code = (current.get("code") or {}).get("sha256")
    if old_code != new_code:
        blocking.append(f"the code ({_abbrev(old_code)} -> {_abbrev(new_code)})")
    own = own_code_change(recorded.get("own_code"), current.get("own_code"))
    if own:
        blocking.append(own)
    old_data, new_data = recorded.get("data") or {}, current.get("data") or {}
    for source in sorted(set(old_data) | set(new_data)):
        old = (old_data.get(source) or {}).get("fingerprint")
        new = (new_data.get(source) or {}).get("fingerprint")
        if source == OWN_CODE_SOURCE:  # a file both name, changed (named_data_change)
            change = named_data_change((old_data.get(source) or {}).get("files"),
                                       (new_data.get(source) or {}).get("files"))
            if change:
                blocking.append(change)
        elif old != new:
            blocking.append(f"the data {source} ({_abbrev(old)} -> {_abbrev(new)}"
                            f"{_data_detail(old_data.get(source), new_data.get(source))})")
    old_git, new_git = recorded.get("git") or {}, current.get("git") or {}
    for key in ("commit", "diff_sha256"):
        if old_git.get(key) != new_git.get(key):
            notes.append(f"git {key} {_abbrev(old_git.get(key))} -> {_abbrev(new_git.get(key))}")
    old_pkg, new_pkg = recorded.get("packages") or {}, current.get("packages") or {}
    for name in sorted(set(old_pkg) | set(new_pkg)):
        if old_pkg.get(name) != new_pkg.get(name):
            notes.append(f"{name} {old_pkg.get(name)} -> {new_pkg.get(name)}")
    old_dev, new_dev = _device_label(recorded.get("device")), _device_label(current.get("device"))
    if old_dev != new_dev:
        notes.append(f"driver device {old_dev} -> {new_dev}")
    return blocking, notes


def _data_detail(old: Optional[dict[str, Any]], new: Optional[dict[str, Any]]) -> str:
    """Which part of a file dataset changed, for the message."""
    if not old or not new or old.get("kind") != "files" or new.get("kind") != "files":
        return ""
    parts = []
    if old.get("table_sha256") != new.get("table_sha256"):
        parts.append("table.parquet")
    if old.get("images") != new.get("images"):
        parts.append("images.npy")
    return ": " + " and ".join(parts) + " changed" if parts else ""


def _device_label(device: Optional[dict[str, Any]]) -> Optional[str]:
    if not device:
        return None
    if device.get("cuda"):
        return ", ".join(f"{d['name']} (sm {d['capability']})" for d in device["cuda"])
    return device.get("cpu")


def _abbrev(value: Optional[str]) -> str:
    return value[:12] if value else "none"
