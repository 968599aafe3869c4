"""Finished trials reused across the experiments under one storage: a trial is identified by
what it computes, and one that finished before with the same identity is not trained again.

A trial's identity (:func:`trial_key`, trials.parquet's ``trial_key``) is a hash of its
resolved configuration (every section, the seed and the seed sources, the epochs, a command's
line and a training function's name; the variant's name only for own code, which may read
it), the dataset's fingerprint, the code's (the runner's source with the researcher's own
files: ``code_fingerprint``), the versions of Python, torch and numpy, and the conditions its
measurements depend on (:func:`conditions_of`). A trial whose code is not all in the
fingerprint (a model plugin's module, a function defined in a notebook) has no identity and
always trains. A new experiment looks through the others under its storage
(:func:`find_reusable`) and takes the rows of every trial with its identity that ended ``ok``
or ``diverged`` (a divergence repeats with the same identity; a failure may be the machine's,
so a failed trial is trained again). A reused row keeps its numbers and names where it came
from (``reused_from``); the experiment's own names (experiment, trial, variant, round, phase)
are the new plan's. ``reuse=False`` trains everything; a resume keeps what it reused before.
What a run reuses is recorded before its first trial (:func:`record_reused`, ``reused.json``),
so that a resume after a driver that died before its tables were written (a second Ctrl-C, a
kill, the OOM killer) takes the same rows again: Tune's saved run never holds them.

A trial's row takes the code, the data's fingerprint and the package versions its final
result was trained with (:func:`run_labels`), not those of a later resume that collects it.

What the identity does not cover: data a training function or a command reads from a path
that neither its configuration nor its command line names (the code fingerprint covers the
``.py`` files and the files the command names), and the machine (a cluster's nodes already
share one experiment's trials).
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional, Sequence

import pandas as pd

from ablations.config.statuses import TrialStatus
from ablations.experiment.provenance.provenance import run_code_label, trial_columns
from ablations.results.io.files import (
    EPOCHS_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    filesystem,
    is_file,
    join,
    list_dir,
    read_bytes,
    write_json_atomic,
)

KEY_VERSION = 1  # bumped when what the key hashes changes: older keys then match nothing
# the statuses a trial of the same identity would end with again
REUSABLE = (TrialStatus.OK, TrialStatus.DIVERGED)
NUMERIC_PACKAGES = ("torch", "numpy")  # the versions that change a trial's numbers
REUSED_FILE = "reused.json"  # Tune folder -> planned trial -> [experiment, its trial, origin]
# in a final result: the trial continued from a saved epoch under other code, data or versions
# (trainable.trained_across_a_change), so it has no identity
MIXED = "trained_across_a_change"


def trial_key(config: Any, *, code_fingerprint: Optional[str], data_source: Optional[str],
              data_fingerprint: Optional[str], packages: Mapping[str, Optional[str]],
              python_version: Optional[str] = None,
              conditions: Optional[Mapping[str, Any]] = None,
              imports: Optional[Mapping[str, Optional[str]]] = None) -> str:
    """The identity of what a trial computes, as 32 hex digits. ``packages``: the installed
    versions (:data:`NUMERIC_PACKAGES` of them count); ``imports``: the versions of the
    distributions own code imports (:func:`own_imports`); ``conditions``: how it runs where
    that changes its measurements (its CPUs and GPUs, a worker of its own)."""
    values = config.to_dict()
    if config.own_code is None:  # the built-in model and a plugin never see the variant's name
        values.pop("ablation", None)
    identity = {"version": KEY_VERSION, "config": values, "code": code_fingerprint,
                "data": [data_source, data_fingerprint],
                "packages": {name: packages.get(name) for name in NUMERIC_PACKAGES},
                "python": python_version or platform.python_version(),
                "conditions": dict(conditions or {})}
    if imports:  # absent where there are none, so that the built-in model's keys stay as they are
        identity["imports"] = dict(sorted(imports.items()))
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fingerprinted(config: Any, provenance: Mapping[str, Any]) -> bool:
    """Whether the code a trial runs is all in its code fingerprint: the runner's own model,
    or own code whose files were all read (provenance.own_code, not ``truncated``). A model
    plugin's module and a training function defined in a notebook are not, so their trials
    have no identity."""
    if not config.plugin:
        return True
    own = provenance.get("own_code")
    # a walk stopped early (a home folder) may have left the code that ran unread
    return config.own_code is not None and bool(own) and not own.get("truncated")


def own_imports(config: Any, provenance: Mapping[str, Any]) -> dict[str, Optional[str]]:
    """The versions of the distributions a trial's own code imports, beyond
    :data:`NUMERIC_PACKAGES` (provenance.own_code's ``packages``, own_code_files.py): a
    scikit-learn or Lightning upgrade changes what it computes. Empty for the built-in model
    and a plugin."""
    if config.own_code is None:
        return {}
    imported = (provenance.get("own_code") or {}).get("packages") or {}
    return {name: version for name, version in imported.items()
            if name not in NUMERIC_PACKAGES}


def conditions_of(options: Any) -> dict[str, Any]:
    """The run's conditions a trial's measurements depend on (peak memory, throughput); the
    counts as floats, so that the library's ``cpus_per_trial=1`` is the command line's 1.0."""
    return {"cpus": float(options.cpus_per_trial), "gpus": float(options.gpus_per_trial),
            "isolated": not options.reuse_workers}


def planned_key(config: Any, metadata: Mapping[str, Any], options: Any) -> Optional[str]:
    """The identity of a trial this run would train, from its experiment.json record; None
    where its code is not all fingerprinted."""
    provenance = metadata.get("provenance") or {}
    if not fingerprinted(config, provenance):
        return None
    columns = trial_columns(provenance, config)
    return trial_key(config, code_fingerprint=run_code_label(provenance),
                     data_source=columns["data_source"],
                     data_fingerprint=columns["data_fingerprint"],
                     packages=provenance.get("packages") or {},
                     python_version=metadata.get("python_version"),
                     conditions=conditions_of(options),
                     imports=own_imports(config, provenance))


def run_labels(plan: Mapping[str, Any], provenance: Mapping[str, Any]
               ) -> dict[str, dict[str, str]]:
    """Plan key -> what a trial's identity takes from this run of the experiment: the code's
    and its data's fingerprints (provenance.trial_columns) and the versions of
    :data:`NUMERIC_PACKAGES` and of what its own code imports (:func:`own_imports`), in one
    mapping. The trainable sends them with the trial's final result, so that a trial finished
    before a resume on changed code or data (``--allow-changed``) or upgraded packages keeps
    what it was trained on (:func:`row_key`)."""
    packages = provenance.get("packages") or {}
    numeric = {name: packages.get(name) for name in NUMERIC_PACKAGES}
    if packages.get("python"):  # the interpreter, which a resume may have changed too
        numeric["python"] = packages["python"]
    labels = {}
    for key, config in plan.items():
        columns = trial_columns(provenance, config)
        versions = json.dumps({**numeric, **own_imports(config, provenance)}, sort_keys=True)
        labels[key] = {"trained_packages": versions,
                       **{name: columns[name] for name in ("code_fingerprint", "data_fingerprint")
                          if columns[name]}}
    return labels


def trained_packages(metrics: Mapping[str, Any]) -> Optional[dict[str, Optional[str]]]:
    """The package versions a trial's final result names (run_labels); None where it names
    none (a result from before they were sent)."""
    try:
        versions = json.loads(metrics.get("trained_packages") or "null")
    except (TypeError, ValueError):
        return None
    return versions if isinstance(versions, dict) else None


def row_key(config: Any, row: Mapping[str, Any], metadata: Mapping[str, Any],
            options: Any, packages: Optional[Mapping[str, Optional[str]]] = None
            ) -> Optional[str]:
    """The identity of a trial that ran, from its trials.parquet row (the code and data its
    final result was trained with), the package versions it was trained with (``packages``:
    trained_packages, what run_labels sent; else its experiment's record) and its
    experiment's record; None where its code is not all fingerprinted."""
    provenance = metadata.get("provenance") or {}
    if not fingerprinted(config, provenance):
        return None
    python = metadata.get("python_version")
    if packages is None:
        packages, imports = provenance.get("packages") or {}, own_imports(config, provenance)
    else:  # run_labels' mapping: Python, the numeric packages, then what own code imports
        python = packages.get("python") or python
        imports = {name: version for name, version in packages.items()
                   if name not in (*NUMERIC_PACKAGES, "python")} \
            if config.own_code is not None else {}
    return trial_key(config, code_fingerprint=row.get("code_fingerprint"),
                     data_source=row.get("data_source"),
                     data_fingerprint=row.get("data_fingerprint"), packages=packages,
                     python_version=python, conditions=conditions_of(options), imports=imports)


@dataclass(frozen=True)
class Reused:
    """The rows of the trials taken from other experiments, renamed into this one's plan."""

    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    # planned trial name -> [experiment folder's name, its trial, "experiment/trial" its
    # numbers were trained in ("" for a grown table's own kept trial)]: what record_reused writes
    taken: dict[str, list[str]]

    @property
    def sources(self) -> dict[str, str]:
        """Planned trial name -> "experiment/trial" it came from ("" where trained here)."""
        return {trial: origin for trial, (_, _, origin) in self.taken.items()}

    @property
    def names(self) -> set[str]:
        return set(self.taken)

    def summary(self, planned: int, name: str) -> str:
        """``12 of 30 trials reused from components-...; 18 to train``; the trials experiment
        ``name`` holds itself (a grown table's, also those it once reused) are kept:
        ``24 of 30 trials kept, 2 reused from ...``."""
        foreign = [origin or f"{experiment}/{source}"
                   for experiment, source, origin in self.taken.values() if experiment != name]
        kept = len(self.taken) - len(foreign)
        experiments = sorted({origin.split("/", 1)[0] for origin in foreign})
        parts = [f"{kept} of {planned} trials kept"] if kept else []
        if foreign:
            parts.append(f"{len(foreign)} reused" if kept
                         else f"{len(foreign)} of {planned} trials reused")
            parts[-1] += f" from {', '.join(experiments)}"
        return f"{', '.join(parts)}; {planned - len(self.sources)} to train"


def finished_trials(root: str) -> set[str]:
    """The names of the trials the experiment at ``root`` finished ok or diverged (what a
    resume or a growth keeps)."""
    table = read_table(join(root, TRIALS_FILE))
    if table is None:
        return set()
    return set(table.loc[table["status"].isin(REUSABLE), "trial_name"].astype(str))


def read_table(path: str) -> Optional[pd.DataFrame]:
    """A Parquet table of an experiment folder (local or in a bucket); None if unreadable."""
    import pyarrow.parquet as pq

    fs, target = filesystem(path)
    try:
        return pq.read_table(target, filesystem=fs).to_pandas()
    except (OSError, ValueError):  # missing, being written, or not a table
        return None


def experiment_folders(storage: str, first: str) -> list[str]:
    """The folders under ``storage`` holding a trials table: ``first`` (this experiment, on a
    resume), then the others by name."""
    names = sorted(list_dir(storage), key=lambda entry: (entry != first, entry))
    return [join(storage, entry) for entry in names
            if is_file(join(storage, entry, TRIALS_FILE))]


def record_reused(root: str, tune_subdir: str, reused: Reused) -> None:
    """Record in ``root``'s reused.json which trials the Tune run in ``tune_subdir`` takes from
    where, before it starts."""
    record = recorded_runs(root)
    record[tune_subdir] = reused.taken
    write_json_atomic(record, join(root, REUSED_FILE))


def recorded_runs(root: str) -> dict[str, dict[str, list[str]]]:
    """``root``'s reused.json (Tune folder -> planned trial -> [experiment, trial, origin]);
    empty where there is none or it cannot be read."""
    path = join(root, REUSED_FILE)
    if not is_file(path):
        return {}
    try:
        record = json.loads(read_bytes(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_reused(root: str, tune_subdir: str) -> dict[str, list[str]]:
    """What the Tune run in ``tune_subdir`` took from other experiments (record_reused)."""
    entries = recorded_runs(root).get(tune_subdir)
    return {str(trial): [str(part) for part in entry] for trial, entry in entries.items()
            if isinstance(entry, list) and len(entry) == 3} if isinstance(entries, dict) else {}


def find_reusable(storage: str, name: str, keys: Mapping[str, str], *,
                  specs: Mapping[str, Any], round_number: int, phase: str,
                  space: str, own_only: bool = False,
                  own_trained: Collection[str] = (),
                  recorded: Optional[Mapping[str, Sequence[str]]] = None
                  ) -> Optional[Reused]:
    """The finished trials under ``storage`` whose identity is one of ``keys`` (planned trial
    name -> key), as rows of this experiment; None if none. Experiment ``name`` itself (a
    resume) gives the rows it took from others before, and those it trained of the trials
    ``own_trained`` names (a grown table's kept trials, which its new Tune run does not hold);
    then, unless ``own_only``, the first other experiment by folder name that holds a key
    gives its rows. ``recorded`` (recorded_reused: planned trial -> [experiment, trial,
    origin]) gives the rows of the trials a resumed run took before that its own table does
    not hold (a driver that died before writing it)."""
    wanted: dict[str, list[str]] = {}
    for trial, key in keys.items():
        wanted.setdefault(key, []).append(trial)
    # planned name -> (folder, source trial, where its numbers were trained)
    found: dict[str, tuple[str, str, str]] = {}
    scanned: dict[str, Optional[pd.DataFrame]] = {}  # folder -> its trials table
    own = join(str(storage), name)
    for folder in experiment_folders(str(storage), name):
        if folder != own and (own_only or all(trial in found for trial in keys)):
            break
        table = scanned[folder] = read_table(join(folder, TRIALS_FILE))
        if table is None:
            continue
        if folder == own and own_trained:  # a grown table's kept trials, by name: trained here
            kept = table[table["status"].isin(REUSABLE)
                         & table["trial_name"].isin([t for t in own_trained if t in specs])]
            for row in kept.to_dict("records"):
                trial = str(row["trial_name"])
                found.setdefault(trial, (folder, trial, str(row.get("reused_from") or "")))
        if "trial_key" not in table or "reused_from" not in table:
            continue  # recorded before trials had an identity
        usable = table[table["status"].isin(REUSABLE) & table["trial_key"].isin(wanted)]
        if folder == own:  # its own trained rows are Tune's to resume (or kept, above)
            usable = usable[usable["reused_from"].fillna("") != ""]
        for row in usable.to_dict("records"):
            origin = row.get("reused_from") or f"{row['experiment']}/{row['trial_name']}"
            for trial in wanted[row["trial_key"]]:
                found.setdefault(trial, (folder, str(row["trial_name"]), str(origin)))
    for trial, (experiment, source, origin) in (recorded or {}).items():
        if trial in specs and trial not in found:
            found[trial] = (join(str(storage), experiment), source, origin)
    if not found:
        return None
    frames: dict[str, list[pd.DataFrame]] = {"trials": [], "epochs": [], "predictions": []}
    for folder in dict.fromkeys(folder for folder, _, _ in found.values()):
        pairs = [(trial, source) for trial, (where, source, _) in found.items()
                 if where == folder]
        for kind, file in (("trials", TRIALS_FILE), ("epochs", EPOCHS_FILE),
                           ("predictions", PREDICTIONS_FILE)):
            # the trials table as scanned above: read once, and the rows match what was found
            table = scanned[folder] if kind == "trials" and folder in scanned \
                else read_table(join(folder, file))
            if table is None or table.empty:
                continue
            for trial, source in pairs:
                rows = table[table["trial_name"] == source].copy()
                if rows.empty:
                    continue
                rows["experiment"], rows["trial_name"] = name, trial
                if "ablation" in rows:  # the same computation may be another variant elsewhere
                    rows["ablation"] = specs[trial].variant
                if kind == "trials":
                    rows["round"], rows["phase"], rows["space"] = round_number, phase, space
                    rows["reused_from"] = found[trial][2]
                frames[kind].append(rows)
    tables = {kind: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
              for kind, parts in frames.items()}
    return Reused(tables["trials"], tables["epochs"], tables["predictions"],
                  {trial: [folder.rstrip("/").rsplit("/", 1)[-1], source, origin]
                   for trial, (folder, source, origin) in found.items()})


def reusable_keys(trials: Sequence[Any], metadata: Mapping[str, Any],
                  options: Any) -> dict[str, str]:
    """Planned trial name -> identity, for the trials a run would train that have one."""
    keys = {spec.name: planned_key(spec.config, metadata, options) for spec in trials}
    return {name: key for name, key in keys.items() if key is not None}
