"""The researcher's code that an experiment ran, fingerprinted file by file, so that a resume
on edited code is refused naming the files (``provenance``'s ``own_code``; the runner's own
source is ``provenance``'s ``code``).

What counts as the code that ran:

- a **command** (``command: "{python} train.py ..."``): the ``.py`` files of the folder the
  experiment starts in (the folder its trials run the command in, and the one shipped to a
  cluster's workers), at any depth, plus every script or config file the command line names
  there (:data:`NAMED_SUFFIXES`, or no suffix: ``bash scripts/train``; at most
  :data:`MAX_NAMED_BYTES` each: a data file it names is data, not code);
- a **training function** (``--model train:fit``): where its module lies in that folder (a
  flat project: ``from model import Net`` imports a neighbour), the folder's ``.py`` files as
  for a command; otherwise its top-level package (every ``.py`` file in it) or its module
  file;
- a **model plugin** (``--model mypkg.model:PLUGIN``) outside the runner's packages: its
  module, as a training function's.

Left out: the folders results and environments live in (:data:`SKIPPED_FOLDERS`, and any
folder holding an experiment.json and the runner's tables or Tune folder: an experiment's
storage), and data (own code loads its
own: a change of data is the code's to notice). At most :data:`MAX_FILES` files are read and
:data:`MAX_ENTRIES` entries looked at; a folder with more (a home folder) is fingerprinted by
the files found first and the record says ``truncated``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

# folders never part of the code: version control, environments, caches, results
SKIPPED_FOLDERS = frozenset({".git", ".venv", "venv", "env", "__pycache__", "ablation_results",
                             "node_modules", ".ipynb_checkpoints", ".mypy_cache",
                             ".pytest_cache", "lightning_logs", "wandb", "mlruns"})
MAX_FILES = 2000
MAX_ENTRIES = 50_000  # files and folders looked at: a walk of a home folder stops early
# what a command line may name as code (a data file it names is read by the code, not code)
NAMED_SUFFIXES = frozenset({".py", ".sh", ".bash", ".yaml", ".yml", ".json", ".toml", ".cfg",
                            ".ini", ".r", ".jl", ".js", ".mjs", ".ts", ".rb", ".pl", ".lua",
                            ".m", ".ipynb"})
MAX_NAMED_BYTES = 1 << 20


def _is_experiment(folder: str) -> bool:
    """Whether ``folder`` is an experiment's storage: its experiment.json beside the tables
    or the Tune folder the runner writes (a project's own experiment.json alone is code)."""
    return os.path.exists(os.path.join(folder, "experiment.json")) and (
        os.path.exists(os.path.join(folder, "trials.parquet"))
        or os.path.isdir(os.path.join(folder, "tune")))


def _entered(top: str, name: str) -> bool:
    return (name not in SKIPPED_FOLDERS and not name.startswith(".")
            and not _is_experiment(os.path.join(top, name)))


def _python_files(folder: Path) -> tuple[list[Path], bool]:
    """(the ``.py`` files under ``folder``, walked in sorted order, at most
    :data:`MAX_FILES`; whether the walk stopped early). The skipped and hidden folders and
    experiments' storage are not entered (an environment inside the project holds tens of
    thousands of files)."""
    found: list[Path] = []
    seen = 0
    walk = os.walk(folder)
    for top, folders, files in walk:
        seen += len(folders) + len(files)
        folders[:] = sorted(name for name in folders if _entered(top, name))
        # not hidden files (an editor's lock `.#train.py`, a link to nowhere while the file
        # is open) nor anything but a file
        found += [Path(top) / name for name in sorted(files) if name.endswith(".py")
                  and not name.startswith(".") and os.path.isfile(os.path.join(top, name))]
        if len(found) > MAX_FILES or seen > MAX_ENTRIES:
            # stopped early only where something is left: more files, or folders to walk
            more = len(found) > MAX_FILES or next(walk, None) is not None
            return sorted(found[:MAX_FILES]), more
    return sorted(found), False


def _words(run: str) -> list[str]:
    """A command line's words that name something as written (no ``{field}`` in them), the
    value of ``--flag=value`` on its own."""
    try:
        words = shlex.split(run)
    except ValueError:  # an unbalanced quote: the command's own check reports it
        words = run.split()
    return [word.split("=")[-1] for word in words if word.split("=")[-1]
            and "{" not in word.split("=")[-1]]


def _named_file(text: str, folder: Path) -> Optional[Path]:
    """The file ``text`` names, relative to ``folder`` or absolute; None where it names no
    file, or one of the environment's (the interpreter, installed packages: not the
    researcher's)."""
    try:
        path = (folder / text).resolve()
        if not path.is_file():
            return None
    except (OSError, ValueError):  # not a path (a NUL, too long)
        return None
    if path in environment_files() or any(path.is_relative_to(folder)
                                           for folder in environment_folders()):
        return None
    return path


@functools.lru_cache(maxsize=1)
def environment_files() -> frozenset[Path]:
    """The interpreters that may stand in a command line: not the researcher's files."""
    return frozenset(Path(found).resolve() for found in
                     (sys.executable, getattr(sys, "_base_executable", None)) if found)


@functools.lru_cache(maxsize=1)
def environment_folders() -> tuple[Path, ...]:
    """Where the interpreter's library and installed packages lie, of the environment and of
    the Python it was made from (not the prefixes themselves: a project in /usr/src/app lies
    under a system Python's /usr)."""
    import sysconfig

    folders = set()
    for base in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=base) if base else sysconfig.get_paths()
        folders.update(Path(paths[key]).resolve() for key in
                       ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    return tuple(sorted(folders))


def _named_files(run: str, folder: Path) -> list[Path]:
    """The code a command line names (``bash train.sh``, ``--config cfg.yaml``,
    ``{python} ../shared/train.py``), in ``folder`` or outside it."""
    named = []
    for word in _words(run):
        path = _named_file(word, folder)
        if path is not None and (path.suffix.lower() in NAMED_SUFFIXES or not path.suffix) \
                and path.stat().st_size <= MAX_NAMED_BYTES:
            named.append(path)
    return named


def own_code_sources(configs: Iterable[Any], folder: Optional[Path] = None
                     ) -> Optional[tuple[Path, list[Path], bool]]:
    """(the folder the paths are relative to, the files, whether a walk stopped early) of the
    researcher's code ``configs`` run (TrialConfigs; the first with own code decides, else the
    first with a model plugin outside the runner's packages); None for the built-in model.
    ``folder``: the folder the experiment starts in (default: the working one)."""
    configs = list(configs)
    here = (folder or Path.cwd()).resolve()
    code = next((config.own_code for config in configs if config.own_code is not None), None)
    if code is None:  # a model plugin: its module, as a training function's
        spec = next((config.plugin for config in configs if config.plugin), "")
        module_name = spec.partition(":")[0]
        if not module_name or module_name.split(".")[0] == "ablations":
            return None
        return _module_sources(module_name, here)
    from ablations.trial.contracts import contract_of

    contract = contract_of(code)
    if contract.program:  # it runs in the starting folder
        files, truncated = _python_files(here)
        return here, sorted(set(files + _named_files(contract.text(code), here))), truncated
    module_name = next(iter(contract.modules(code)), None)
    if module_name is None:  # the module --model names
        spec = next((config.plugin for config in configs if config.own_code is code), "")
        module_name = spec.partition(":")[0]
    return _module_sources(module_name, here) if module_name else None


def _module_sources(module_name: str, here: Path) -> Optional[tuple[Path, list[Path], bool]]:
    """The files of module ``module_name`` as own_code_sources gives them: the folder ``here``
    where the module lies in it (a flat project's neighbours), else its top-level package or
    its file; None for a module with no file (a notebook's, an interactive session's)."""
    module = sys.modules.get(module_name)
    if module is not None:
        where = getattr(module, "__file__", None)
    else:  # not imported in this process: where it would be
        try:
            found = importlib.util.find_spec(module_name)
        except (ValueError, ImportError):
            found = None
        where = found.origin if found is not None and found.has_location else None
    origin = Path(where).resolve() if where else None
    if origin is None or not origin.is_file():
        return None  # defined in a notebook or an interactive session: no file to read
    if origin.is_relative_to(here):
        return (here, *_python_files(here))
    top = module_name.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ValueError, ImportError):  # __main__ of a script outside the folder: no spec
        spec = None
    if spec is not None and spec.submodule_search_locations:
        package = Path(list(spec.submodule_search_locations)[0]).resolve()
        return (package.parent, *_python_files(package))
    return origin.parent, [origin], False


def own_code_record(configs: Iterable[Any], folder: Optional[Path] = None
                    ) -> Optional[dict[str, Any]]:
    """provenance's ``own_code``: ``root`` (the folder), ``files`` (relative path -> the
    first 16 hex digits of its sha256), ``sha256`` (over the paths and contents, sorted),
    ``truncated`` (the walk stopped at :data:`MAX_FILES` files or :data:`MAX_ENTRIES`
    entries) and ``packages`` (imported_packages); None for the built-in model."""
    found = own_code_sources(configs, folder)
    if found is None:
        return None
    root, files, truncated = found
    digest = hashlib.sha256()
    hashes = {}
    for path in files:
        key = path.relative_to(root).as_posix() if path.is_relative_to(root) \
            else path.as_posix()  # a script the command line names outside the folder
        try:
            data = path.read_bytes()
        except OSError as exc:  # removed or made unreadable since the walk: recorded as such
            data = f"unreadable: {exc.strerror or type(exc).__name__}".encode()
        hashes[key] = hashlib.sha256(data).hexdigest()[:16]
        digest.update(key.encode() + b"\0" + data + b"\0")
    return {"root": str(root), "files": hashes, "sha256": digest.hexdigest(),
            "truncated": truncated, "packages": imported_packages(root, files)}


def imported_packages(root: Path, files: Iterable[Path]) -> dict[str, Optional[str]]:
    """The installed distributions the ``.py`` files among ``files`` import, by name, with
    their versions: the top-level names of their absolute imports, less the standard library,
    the researcher's own modules (a file or folder of that name in ``root``) and the runner's
    package, mapped to distributions (``lightning`` -> lightning, ``sklearn`` ->
    scikit-learn). A trial's identity includes them (trial_store.py), so that an upgrade of
    what the researcher's code imports trains its trials again. A file that does not parse
    adds nothing (its trials fail, and a failure is never reused)."""
    files = list(files)
    local = {path.relative_to(root).parts[0].removesuffix(".py") for path in files
             if path.is_relative_to(root)}
    names: set[str] = set()
    for path in files:
        if path.suffix != ".py":
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    names -= local | set(sys.stdlib_module_names) | {"ablations", "__future__"}
    if not names:
        return {}
    where = importlib.metadata.packages_distributions()
    versions: dict[str, Optional[str]] = {}
    for name in sorted(names):
        for dist in where.get(name, ()):
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
    return dict(sorted(versions.items()))


def config_words(config: Any) -> list[str]:
    """What a trial of own code may name a file with: its command line's words (without a
    ``{field}``) and its configuration's string values."""
    import dataclasses

    from ablations.trial.contracts import contract_of

    if config.own_code is None:
        return []
    words = _words(contract_of(config.own_code).text(config.own_code))
    words += [value for value in dataclasses.asdict(config.model).values()
              if isinstance(value, str) and value]
    return sorted(set(words))


def code_paths(record: Optional[dict[str, Any]]) -> Optional[set[Path]]:
    """The files an :func:`own_code_record` read, as paths; None without a record."""
    if not record:
        return None
    return {Path(record["root"]) / name for name in record.get("files") or {}}


def named_data(configs: Iterable[Any], folder: Optional[Path] = None,
               code: Optional[set[Path]] = None) -> dict[str, Any]:
    """The files own code's trials name that are not its code (``--data data.csv``,
    ``data_path: values.txt``: :func:`config_words` that are paths of existing files, relative
    to ``folder``, the one the experiment starts in, or absolute; not a folder, not the code
    :func:`own_code_record` reads, ``code`` where the caller has it, not the environment's):
    ``files`` (path -> its :func:`file_fingerprint`) and ``words`` (the word -> the path it
    names). A trial's data fingerprint is that of the files its own words name
    (provenance.trial_columns), so a trial that names changed data is another trial, and one
    that names none keeps its identity."""
    here = (folder or Path.cwd()).resolve()
    configs = [config for config in configs if config.own_code is not None]
    if not configs:
        return {"files": {}, "words": {}}
    if code is None:  # the code's files, which are not its data
        sources = own_code_sources(configs, here)
        code = set(sources[1]) if sources is not None else set()
    files, named = {}, {}
    for word in sorted({word for config in configs for word in config_words(config)}):
        path = _named_file(word, here)
        if path is not None and path not in code:
            key = path.relative_to(here).as_posix() if path.is_relative_to(here) \
                else path.as_posix()
            named[word] = key
            if key not in files:
                files[key] = file_fingerprint(path)
    return {"files": dict(sorted(files.items())), "words": named}


WHOLE_FILE_BYTES = 64 << 20  # a file up to this size is hashed whole
SAMPLE_BYTES = 1 << 20  # of a larger one, this much at its start, middle and end


def file_fingerprint(path: Path) -> str:
    """16 hex digits of a file's sha256 with its size; a file over
    :data:`WHOLE_FILE_BYTES` is hashed at its start, middle and end (reading tens of GB at
    each start is not an option), as a file dataset's images are sampled. ``unreadable: ...``
    where it cannot be read."""
    try:
        stat = path.stat()
        digest = hashlib.sha256(str(stat.st_size).encode())
        with open(path, "rb") as handle:
            if stat.st_size <= WHOLE_FILE_BYTES:
                for chunk in iter(lambda: handle.read(SAMPLE_BYTES), b""):
                    digest.update(chunk)
            else:
                for offset in (0, stat.st_size // 2, stat.st_size - SAMPLE_BYTES):
                    handle.seek(offset)
                    digest.update(handle.read(SAMPLE_BYTES))
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"
    return digest.hexdigest()[:16]


def named_data_change(old: Optional[dict[str, str]], new: Optional[dict[str, str]]
                      ) -> Optional[str]:
    """A phrase naming the data files both :func:`named_data` records hold whose contents
    differ (``the files your trials name (data.csv changed)``); None where none does. A file
    only one names is no change: a round, a stage or a growth plans other trials (other
    words), and an output a trial writes under a fixed name did not exist before it ran."""
    old, new = old or {}, new or {}
    changed = [name for name in old if name in new and old[name] != new[name]]
    if not changed:
        return None
    return f"the files your trials name ({_listed(changed)} changed)"


def _listed(names: list[str]) -> str:
    """The first five of ``names``, and how many more."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def own_code_change(old: Optional[dict[str, Any]], new: Optional[dict[str, Any]]
                    ) -> Optional[str]:
    """A phrase naming what changed in the researcher's code between two records
    (``your code (train.py changed; utils.py added)``); None when nothing did, or when the
    older experiment recorded none."""
    if not old or not new or old.get("sha256") == new.get("sha256"):
        return None
    before, after = old.get("files") or {}, new.get("files") or {}
    parts = []
    for label, names in (
            ("changed", [n for n in sorted(before) if n in after and before[n] != after[n]]),
            ("added", [n for n in sorted(after) if n not in before]),
            ("removed", [n for n in sorted(before) if n not in after])):
        if names:
            parts.append(f"{_listed(names)} {label}")
    return f"your code ({'; '.join(parts) or 'its files moved'})"


def combined_fingerprint(runner: Optional[str], own: Optional[str]) -> Optional[str]:
    """trials.parquet's ``code_fingerprint``: 16 hex digits of the runner's source hash, or,
    with own code, of the two hashes together (either changing changes it)."""
    if not runner and not own:
        return None
    if not own:
        return runner[:16]
    return hashlib.sha256(f"{runner or ''}\0{own}".encode()).hexdigest()[:16]
