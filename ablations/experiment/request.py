"""What an experiment is asked to be: :class:`Request`, one typed record that the command line
fills from its flags and :class:`ablations.experiment.api.Experiment` from its arguments, and
the checks both need (the experiment's name, its storage, a folder that already exists).

Planning (ablations/experiment/planning.py) takes a Request and never changes it. Every check
here raises :class:`UsageError` (one line, the problem and the fix); the command line prints it
with exit code 2, the library lets it propagate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from results.io.files import check_bucket, first_line, is_uri, join, list_dir

DEFAULT_STORAGE = "ablation_results"
DEFAULT_SEEDS = (0, 1, 2)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class UsageError(Exception):
    """Bad input found before any trial starts; printed as one line, exit code 2."""


@dataclass
class Request:
    """An experiment to plan: the space, its seeds, the configuration and how to decide.

    The fields are the command line's flags (``run_ablations.py --help``) under their
    argparse names, with the same defaults; ``overrides`` are ``--set KEY=VALUE`` pairs in
    order. ``seeds``: the seeds every variant runs, or ``"auto"`` (rounds, ``pilot`` seeds
    first, up to ``max_seeds``).
    """

    space: str = "components"
    seeds: list[int] | str = field(default_factory=lambda: list(DEFAULT_SEEDS))
    only: Optional[str] = None  # comma-separated variants
    model: Optional[str] = None  # a plugin, package.module:NAME
    config: Optional[str] = None  # a YAML file or a preset's name
    overrides: list[tuple[str, Any]] = field(default_factory=list)
    epochs: Optional[int] = None
    data: Optional[str] = None  # a data directory; None: the synthetic set
    max_train_examples: Optional[int] = None
    max_eval_examples: Optional[int] = None
    seed_sources: Optional[str] = None
    pilot: Optional[int] = None
    max_seeds: Optional[int] = None
    null_control: bool = False
    cross_seeds: bool = False
    num_samples: int = 16  # trials of a search space
    scheduler: Optional[str] = None  # asha / fifo, search spaces only
    auto_batch: bool = False
    resolve_conflicts: bool = False
    design: str = "table"  # "factorial": the cells of a design over ``factors``
    factors: Optional[str] = None  # comma-separated boolean config keys (design="factorial")
    tune_each: Optional[str] = None  # comma-separated keys every arm is tuned over
    tune_budget: int = 8  # search trials per arm (tune_each)
    metric: str = "test_mae"
    margin: Optional[str] = None  # None: 5% of the reference's mean
    alpha: float = 0.05
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    address: Optional[str] = None  # None: a local Ray
    name: Optional[str] = None
    storage: str = DEFAULT_STORAGE

    @classmethod
    def of(cls, values: Any) -> "Request":
        """The Request with each field taken from ``values``' attribute of the same name
        (the command line's parsed flags)."""
        return cls(**{f.name: getattr(values, f.name) for f in fields(cls)})

    @staticmethod
    def seeds_from(seeds: int | Sequence[int] | str) -> list[int] | str:
        """A count (3: seeds 0, 1, 2), a list of seeds, or ``"auto"``, checked."""
        if isinstance(seeds, str):
            if seeds != "auto":
                raise UsageError(f"seeds {seeds!r}: give a count, a list of seeds or 'auto'")
            return seeds
        out = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
        if not out or len(set(out)) != len(out) or min(out) < 0:
            raise UsageError(f"seeds {seeds!r}: give at least one seed, distinct, >= 0")
        return out

    def check(self) -> "Request":
        """Every value the flags' parsers check, checked here too (the library gets no
        argparse): one UsageError naming the field, before anything is planned."""
        problems = {
            "--metric": metric_problem(self.metric),
            "--alpha": alpha_problem(self.alpha),
            "--margin": None if self.margin is None else margin_problem(str(self.margin)),
            "--pilot": at_least_problem(self.pilot, 2),
            "--max-seeds": at_least_problem(self.max_seeds, 2),
            "--epochs": at_least_problem(self.epochs, 1),
            "--num-samples": at_least_problem(self.num_samples, 1),
            "--tune-budget": at_least_problem(self.tune_budget, 2),
            "--tune-each": None if self.tune_each is None else tune_keys_problem(self.tune_each),
            "--max-train-examples": at_least_problem(self.max_train_examples, 0),
            "--max-eval-examples": at_least_problem(self.max_eval_examples, 0),
            "--cpus-per-trial": resource_problem(self.cpus_per_trial),
            "--gpus-per-trial": resource_problem(self.gpus_per_trial),
        }
        for flag, problem in problems.items():
            if problem:
                raise UsageError(f"{flag}: {problem}")
        return self

    def overrides_from(self, values: Optional[Mapping[str, Any]]) -> "Request":
        self.overrides = [(str(k), v) for k, v in (values or {}).items()]
        return self


def metric_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a numeric trials.parquet column the verdicts can use; None if it is."""
    from results.io.schema import TRIAL_COLUMNS

    numeric = [column for column, dtype, _ in TRIAL_COLUMNS
               if dtype == "float64" and column.startswith(("test_", "val_", "train_"))]
    if name in numeric:
        return None
    return f"{name!r} is not a metric column; choose one of: {', '.join(numeric)}"


def tune_keys_problem(text: str) -> Optional[str]:
    """Why ``text`` is not a comma-separated list of keys with a search range; None if it is."""
    from search_spaces.hpo import HPO_SEARCH

    keys = [key.strip() for key in str(text).split(",") if key.strip()]
    unknown = [key for key in keys if key not in HPO_SEARCH]
    if keys and not unknown and len(set(keys)) == len(keys):
        return None
    named = ",".join(unknown) or repr(text)
    return (f"{named}: give distinct keys that have a search range "
            f"(search_spaces/hpo.py): {', '.join(HPO_SEARCH)}")


def alpha_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a family-wise error rate in (0, 0.5); None if it is."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    return None if 0 < number < 0.5 else f"{value!r}: must be a number in (0, 0.5), e.g. 0.05"


def margin_problem(text: str) -> Optional[str]:
    """Why ``text`` is not an equivalence margin (``0.02`` or ``5%``); None if it is."""
    from results.stats.verdicts import parse_margin

    try:
        parse_margin(text)
    except ValueError as exc:
        return str(exc)
    return None


def at_least_problem(value: Optional[int], minimum: int) -> Optional[str]:
    """Why ``value`` (None: not given) is not an integer >= ``minimum``."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)
                         and value >= minimum):
        return None
    return f"{value!r} must be an integer >= {minimum}"


def resource_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a finite number of CPUs or GPUs >= 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"{value!r} is not a number"
    return None if math.isfinite(number) and number >= 0 else \
        f"{value!r} must be a finite number >= 0"


def check_name(name: str, flag: str = "--name") -> str:
    """An experiment's name: its folder under the storage, so a name and never a path."""
    if not NAME_PATTERN.match(name):
        raise UsageError(f"{flag} {name!r}: use letters, digits, '.', '_' and '-' only "
                         "(the experiment's folder is --storage/NAME)")
    return name


def storage_root(text: str) -> str:
    """The storage as a local absolute path or a URI (s3://, gs://, file://, ...), checked."""
    if is_uri(text):
        if "?" in text:  # the experiment's folder is joined onto the URI: no query there
            raise UsageError(f"--storage {text}: options in the URI's query are not supported; "
                             "set them in the environment instead (AWS_ENDPOINT_URL, "
                             "AWS_DEFAULT_REGION, ...: docs/storage.md)")
        try:
            check_bucket(text)
        except (ValueError, OSError, ImportError) as exc:
            first = first_line(exc)
            raise UsageError(f"--storage {text}: {first}") from None
        return text.rstrip("/")
    storage = Path(text).expanduser().resolve()
    if storage.exists() and not storage.is_dir():
        raise UsageError(f"--storage {storage} is a file, not a directory")
    return str(storage)


def new_experiment_root(storage: str, name: str) -> str:
    """The folder of a new experiment, refused when it already holds something."""
    root = join(storage, check_name(name))
    if list_dir(root):
        raise UsageError(f"{root} already exists; choose another name (run_ablations.py "
                         "--resume continues an experiment)")
    return root
