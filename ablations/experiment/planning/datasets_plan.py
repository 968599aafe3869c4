"""Planning an experiment over several datasets (docs/datasets.md): the datasets a request
names, each a name and the configuration keys that select it, and the ablation table expanded
on each, seeds paired within a dataset.

A dataset is given as

- ``synthetic``: the embedded synthetic data;
- a directory (``--data DIR``, named by its last part; ``--data NAME=DIR`` names it);
- in a space file's ``datasets:``, a name mapped to a directory, to ``synthetic``, or to the
  keys that select it (``{data_dir: ..., max_train_examples: 200}``; own code: its own keys,
  e.g. ``{subset: even}``).

Trials of an experiment over two or more datasets are named ``<dataset>.<variant>-seed<seed>``
and carry the name in the ``dataset`` key (trials.parquet's ``dataset`` column).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ablations.experiment.core.design_options import Factorial, Tuned, rounds_of
from ablations.config import TrialConfig, apply_overrides
from ablations.config.values import expanded_path
from ablations.experiment.core.request import Request, UsageError, arg

SYNTHETIC = "synthetic"
DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # no dot: trial names split on it


def requested_datasets(args: Request, space: Any) -> Optional[dict[str, dict[str, Any]]]:
    """name -> configuration keys of each dataset the request (``datasets``) or the space file
    (``datasets:``) names, in their order; None for an experiment on one dataset as ``data``
    gives it.

    Raises:
        UsageError: both given, ``data`` beside them, a name given twice or not a name, a value
            that is neither a directory, ``synthetic`` nor a mapping of keys.
    """
    from_file = getattr(space, "datasets", None) or None
    given = args.datasets
    if given is not None and from_file is not None:
        raise UsageError(f"{arg('datasets')} and {space.source_file}'s datasets: both name the "
                         "datasets; give one of the two")
    if given is None and from_file is not None and args.data is not None:
        raise UsageError(f"{arg('data')} and {space.source_file}'s datasets: both name the "
                         "data; drop one of the two")
    # what a refusal names: the flag (the library's argument) or the file's key
    label = arg("datasets") if given is not None else f"{space.source_file}: datasets"
    given = from_file if given is None else given
    if given is None:
        return None
    if args.data is not None:
        raise UsageError(f"{arg('data')} and {arg('datasets')}: give the datasets once, as "
                         f"{arg('datasets')} (NAME=DIR, DIR or synthetic)")
    if isinstance(given, (str, bytes)) or not isinstance(given, (Mapping, list, tuple)):
        raise UsageError(f"{arg('datasets')} {given!r}: give a list (NAME=DIR, DIR or "
                         f"synthetic) or a mapping of names; for one dataset give {arg('data')}")
    items = list(given.items()) if isinstance(given, Mapping) else [
        _named(str(value)) for value in given]
    if not items:
        raise UsageError(f"{label}: no dataset given; give one or more (NAME=DIR, DIR "
                         "or synthetic)")
    out: dict[str, dict[str, Any]] = {}
    for name, value in items:
        name = str(name)
        if not DATASET_NAME.match(name):
            raise UsageError(f"{label}: {name!r} is not a dataset name; use letters, "
                             "digits, '-' and '_' (no dots), e.g. climate_e1=DIR")
        if name in out:
            raise UsageError(f"{label}: dataset {name!r} is given twice; name each "
                             "once (NAME=DIR)")
        out[name] = _keys_of(name, value, label)
        if name == SYNTHETIC and "data_dir" in out[name]:
            raise UsageError(f"{label}: {SYNTHETIC!r} names the embedded synthetic data; give "
                             f"the dataset {value!r} another name (e.g. mine=DIR)")
    return out


def _named(text: str) -> tuple[str, Any]:
    """``NAME=DIR`` -> (NAME, DIR); ``DIR`` -> (its last part, DIR); ``synthetic`` -> itself."""
    if "=" in text:
        name, _, value = text.partition("=")
        return name.strip(), value.strip()
    if text == SYNTHETIC:
        return SYNTHETIC, SYNTHETIC
    return Path(text.rstrip("/")).name or text, text


def _keys_of(name: str, value: Any, label: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if value is None or value == SYNTHETIC:
        return {}
    if isinstance(value, (str, Path)) and str(value):
        return {"data_dir": str(expanded_path(value, arg("datasets")).resolve())}
    raise UsageError(f"{label}: dataset {name!r}: give a directory, 'synthetic' or a "
                     f"mapping of configuration keys, not {value!r}")


def refuse_across(args: Request, space: Any) -> None:
    """What an experiment over several datasets does not combine with, refused before anything
    runs: each is a design with its own plan of trials or a margin with no common meaning.

    Raises:
        UsageError: the first such flag, and what to do instead.
    """
    from ablations.results.stats.verdicts import parse_margin  # scipy: only for several datasets

    refused = [
        (args.seeds == "auto", f"{arg('seeds')} auto",
         f"give fixed seeds ({arg('seeds')} 5) or run --seeds auto on each dataset"),
        (isinstance(args.design, Factorial), f"{arg('design')} factorial",
         "run the factorial design on each dataset"),
        (isinstance(args.design, Tuned), arg("tune_each"),
         "run the tuned ablation on each dataset"),
        (space.is_search, f"space {space.name} (a search)", "give an ablation table"),
        (rounds_of(args.design).max_seeds is not None, arg("max_seeds"),
         "across datasets the seeds are fixed; drop it"),
        (args.cross_seeds, arg("cross_seeds"), "cross the seed sources on each dataset"),
        (args.auto_batch, arg("auto_batch"),
         "each dataset fits its own batch: run --auto-batch per dataset, or set batch_size"),
        (args.margin is not None and not parse_margin(args.margin)[1],
         f"{arg('margin')} {args.margin}",
         "a margin in one dataset's units has no meaning on another; give a percentage "
         f"({arg('margin')} 5%)"),
    ]
    for refuse, what, instead in refused:
        if refuse:
            raise UsageError(f"{what} with several datasets: not supported; {instead}")


def on_dataset(base: TrialConfig, name: str, keys: Mapping[str, Any]) -> TrialConfig:
    """``base`` with the dataset's keys and its name.

    Raises:
        UsageError: the keys name the dataset themselves, or select a directory for own
            code (which reads its own data).
    """
    if "dataset" in keys:
        raise UsageError(f"dataset {name}: 'dataset' is the runner's name of it, not a key "
                         "to set; give the keys that select it")
    if base.own_code is not None and ("data_dir" in keys or (not keys and name == SYNTHETIC)):
        raise UsageError(f"dataset {name}: own code reads its own data; give the dataset as a "
                         "mapping of its config keys in the space file (datasets: {"
                         f"{name}: {{key: value}}}})")
    return apply_overrides(base, {**keys, "dataset": name}, source=f"dataset {name}")


def check_named(name: str, trials: Sequence[Any]) -> None:
    """Every trial planned on dataset ``name`` still carries its name: a variant, ``--set``
    or ``--config`` that sets ``dataset`` is refused (it would relabel its trials).

    Raises:
        UsageError: the first trial whose configuration names another dataset.
    """
    for spec in trials:
        if spec.config.dataset != name:
            raise UsageError(f"variant {spec.variant} sets dataset={spec.config.dataset!r}; "
                             f"the datasets are named by {arg('datasets')} or a space file's "
                             "datasets:, not by a key")


def single_dataset_name(base: TrialConfig) -> str:
    """The name of an experiment's one dataset: its directory's last part, ``synthetic``, or
    "" for own code (whose data the runner does not know)."""
    if base.own_code is not None:
        return ""
    return Path(base.data.data_dir).name if base.data.data_dir else SYNTHETIC


def named_trials(name: str, trials: Sequence[Any], prefix: bool) -> list[Any]:
    """Trial specs of one dataset: with ``prefix``, named ``<dataset>.<name>``."""
    if not prefix:
        return list(trials)
    return [dataclasses.replace(spec, name=f"{name}.{spec.name}") for spec in trials]

