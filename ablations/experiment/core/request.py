"""What an experiment is asked to be: :class:`Request`, one typed record that
:class:`ablations.experiment.api.Experiment` fills from its arguments and the command line from
its flags (ablations/cli/requests.py), and the checks both need (the experiment's name, its
storage, a folder that already exists).

Planning (ablations/experiment/prepare.py) takes a Request and never changes it. Every check
raises :class:`UsageError` (one line, the problem and the fix) naming the Request's fields with
:func:`arg`: the library's message says ``max_seeds``, the command line's ``--max-seeds``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Sequence

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_METRIC
from ablations.config.values import NamesArguments, arg, expanded_path
from ablations.search_spaces.hpo import HPO_SEARCH
from ablations.results.io.files import check_bucket, first_line, is_uri, join, list_dir

DEFAULT_STORAGE = "ablation_results"
DEFAULT_SEEDS = (0, 1, 2)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# a registered design's name or package.module:Class (designs/registry.py)
DESIGN_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")
SCHEDULERS = ("asha", "fifo")  # core/design_options.py's Search.scheduler


class UsageError(NamesArguments, Exception):
    """Bad input found before any trial starts; printed as one line, exit code 2. The
    arguments its message names (:func:`arg`) read as the library's argument names;
    :meth:`render` with :func:`flag_of` gives the command line's text."""


@dataclass
class Request:
    """An experiment to plan: the space, its seeds, the configuration and how to decide.

    The command line's flags are these fields (``--max-train-examples`` is
    ``max_train_examples``, ``--set KEY=VALUE`` pairs are ``overrides`` in order), with the
    same defaults, and a design's options (``--max-seeds`` is ``Rounds.max_seeds``,
    core/design_options.py). ``seeds``: the seeds every variant runs, or ``"auto"`` (rounds: their
    pilot and most seeds a ``Rounds`` design's). ``given``: the fields the caller set
    explicitly (a continuation refuses those that would change the recorded plan); the
    defaults are not "given".
    """

    space: str = "components"
    seeds: list[int] | Literal["auto"] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    only: Optional[list[str]] = None  # the variants to run (the reference is added)
    model: Optional[str] = None  # a plugin or a training function, package.module:NAME
    # a program to ablate: its command line with {key} fields (docs/own-code.md)
    command: Optional[str] = None
    # the command's metrics: "name:higher,name:lower:unit", or name -> direction (a space
    # file's metrics: too)
    metrics: Optional[str | dict[str, Any]] = None
    config: Optional[str] = None  # a YAML file or a preset's name
    overrides: list[tuple[str, Any]] = field(default_factory=list)
    epochs: Optional[int] = None
    data: Optional[str] = None  # a data directory; None: the synthetic set
    # several datasets, each ablated (docs/datasets.md): "NAME=DIR", "DIR" or "synthetic", or
    # name -> a directory, "synthetic" or the keys that select it
    datasets: Optional[list[str] | dict[str, Any]] = None
    max_train_examples: Optional[int] = None
    max_eval_examples: Optional[int] = None
    seed_sources: Optional[str] = None
    null_control: bool = False
    cross_seeds: bool = False
    auto_batch: bool = False
    resolve_conflicts: bool = False
    # a built-in design with its options (core/design_options.py: Factorial, Tuned, Search,
    # Rounds: the pilot and most seeds of rounds, or of those a fixed table plans), or
    # a design of one's own by its registered name or package.module:Class
    # (designs/registry.py); None: a table, or rounds (seeds "auto"), or a space's search
    design: Any = None
    metric: str = DEFAULT_METRIC
    margin: Optional[str | float] = None  # None: DEFAULT_MARGIN (5% of the reference's mean)
    alpha: float = DEFAULT_ALPHA
    # equivalent only where the one-sided upper bound on the arm's rate of divergence is
    # below it (docs/verdicts.md); None: no tolerance
    max_failure_rate: Optional[float] = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    # seconds each run of a trial may take; past it the trial ends as ``timeout``
    # (ablations/trial/time_limit.py). None: the space file's ``time_limit:``, else none
    time_limit: Optional[float] = None
    address: Optional[str] = None  # None: a local Ray
    name: Optional[str] = None
    storage: str = DEFAULT_STORAGE
    given: frozenset[str] = frozenset()  # the fields set explicitly

    @staticmethod
    def seeds_from(seeds: int | Sequence[int] | str) -> list[int] | str:
        """A count (3: seeds 0, 1, 2), a list of seeds, or ``"auto"``, checked."""
        if isinstance(seeds, str):
            if seeds != "auto":
                raise UsageError(f"{arg('seeds')} {seeds!r}: give a count, a list of seeds "
                                 "or 'auto'")
            return seeds
        out = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
        if not out or len(set(out)) != len(out) or min(out) < 0:
            raise UsageError(f"{arg('seeds')} {seeds!r}: give at least one seed, distinct, "
                             ">= 0")
        return out

    def check(self) -> "Request":
        """Every value the flags' parsers check, checked here too (the library gets no
        argparse): one UsageError naming the field, before anything is planned."""
        problems = {
            "metric": None if re.fullmatch(r"[A-Za-z_]\w*", self.metric or "") else
            f"{self.metric!r} is not a metric name",
            "alpha": alpha_problem(self.alpha),
            "max_failure_rate": rate_problem(self.max_failure_rate),
            "margin": None if self.margin is None else margin_problem(str(self.margin)),
            "epochs": at_least_problem(self.epochs, 1),
            "only": names_problem(self.only),
            "design": design_problem(self.design),
            **(self.design.problems() if hasattr(self.design, "problems") else {}),
            "max_train_examples": at_least_problem(self.max_train_examples, 0),
            "max_eval_examples": at_least_problem(self.max_eval_examples, 0),
            "cpus_per_trial": resource_problem(self.cpus_per_trial),
            "gpus_per_trial": resource_problem(self.gpus_per_trial),
            "time_limit": None if self.time_limit is None else time_limit_problem(self.time_limit),
        }
        for name, problem in problems.items():
            if problem:
                raise UsageError(f"{arg(name)}: {problem}")
        if not problems["cpus_per_trial"] and not problems["gpus_per_trial"] \
                and float(self.cpus_per_trial) == 0 and float(self.gpus_per_trial) == 0:
            raise UsageError(f"{arg('cpus_per_trial')} 0 with {arg('gpus_per_trial')} 0: a "
                             "trial needs a CPU or a GPU; give it at least one")
        return self


def given_names(fields: Iterable[str], design: Any = None) -> frozenset[str]:
    """``Request.given``: the fields given, and the argument names of the options a built-in
    design was given with (core/design_options.py: a resume refuses those that would change the
    recorded plan)."""
    return frozenset(fields) | (design.given() if hasattr(design, "given") else set())


def time_limit_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a time limit (seconds, or ``90s``, ``15m``, ``2h``)."""
    from ablations.trial.time_limit import parse_duration

    try:
        parse_duration(value)
    except ValueError as exc:
        return str(exc)
    return None


def names_problem(names: Optional[Sequence[str]]) -> Optional[str]:
    """Why ``names`` (None: not given) is not a list of names, each once."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        return f"{names!r} is not a list of names; give one, e.g. ['baseline', 'no_images']"
    if not names or not all(n.strip() for n in names):
        return f"an empty name in {','.join(names)!r}; give names separated by commas"
    repeated = sorted({n for n in names if list(names).count(n) > 1})
    return f"{repeated[0]} is given twice; give each once" if repeated else None


def design_problem(design: Any) -> Optional[str]:
    """Why ``design`` asks for no design: a built-in's options (core/design_options.py), a
    registered design's name or ``package.module:Class`` (designs/registry.py finds it)."""
    if design is None or hasattr(design, "problems"):
        return None
    if isinstance(design, str) and DESIGN_NAME.fullmatch(design):
        return None
    return (f"{design!r}: give a design's options (Factorial, Tuned, Search, Rounds) or name a "
            "design of your own as package.module:Class")


def choice_problem(value: Any, choices: Sequence[str]) -> Optional[str]:
    """Why ``value`` is not one of ``choices``."""
    return None if value in choices else f"{value!r}: choose one of {', '.join(choices)}"


def metric_problem(name: str, declared: Optional[Sequence[str]] = None) -> Optional[str]:
    """Why ``name`` is not a metric the verdicts can use; None if it is: a numeric
    trials.parquet column of the built-in model and plugins, or one of the metrics own code
    ``declared``."""
    from ablations.results.io.schema import TRIAL_COLUMNS

    numeric = list(declared) if declared is not None else [
        column for column, dtype, _ in TRIAL_COLUMNS
        if dtype == "float64" and column.startswith(("test_", "val_", "train_"))]
    if name in numeric:
        return None
    kind = "a metric the code declares" if declared is not None else "a metric column"
    return f"{name!r} is not {kind}; choose one of: {', '.join(numeric)}"


def tune_keys_problem(keys: Optional[Sequence[str]]) -> Optional[str]:
    """Why ``keys`` are not distinct keys with a search range; None if they are (or none are
    given)."""
    if keys is None:
        return None
    problem = names_problem(keys)
    if problem:
        return problem
    unknown = [key for key in keys if key not in HPO_SEARCH]
    if keys and not unknown:
        return None
    named = ",".join(unknown) or "no key"
    return (f"{named}: give keys that have a search range (search_spaces/hpo.py): "
            f"{', '.join(HPO_SEARCH)}")


def alpha_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a family-wise error rate in (0, 0.5); None if it is."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    return None if 0 < number < 0.5 else f"{value!r}: must be a number in (0, 0.5), e.g. 0.05"


def rate_of(value: Any) -> Optional[float]:
    """A rate as given: a number, or a percentage's text (``"10%"``); NaN where it is
    neither, None where none is given."""
    if value is None:
        return None
    try:
        text = str(value).strip()
        return float(text[:-1]) / 100 if text.endswith("%") else float(value)
    except (TypeError, ValueError):
        return float("nan")


def rate_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a rate in (0, 1); None if it is, or if none is given."""
    if value is None:
        return None
    number = rate_of(value)
    if isinstance(value, (int, float)) and 0 < number < 1:
        return None
    return f"{value!r}: must be a rate in (0, 1), e.g. 0.1"


def margin_problem(text: str) -> Optional[str]:
    """Why ``text`` is not an equivalence margin (``0.02`` or ``5%``); None if it is."""
    from ablations.results.stats.verdicts import parse_margin

    try:
        parse_margin(text)
    except ValueError as exc:  # its message starts with "margin ": the caller names the argument
        return str(exc).removeprefix("margin ")
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


def check_name(name: str) -> str:
    """An experiment's name: its folder under the storage, so a name and never a path."""
    if len(name) > 100:
        raise UsageError(f"{arg('name')} is {len(name)} characters long: 100 at most (the "
                         f"experiment's folder is {arg('storage')}/NAME)")
    if not NAME_PATTERN.match(name):
        raise UsageError(f"{arg('name')} {name!r}: use letters, digits, '.', '_' and '-' only "
                         f"(the experiment's folder is {arg('storage')}/NAME)")
    return name


def check_project_folder(folder: Path | str) -> None:
    """The folder an experiment starts in, which Ray puts on its workers' module path: a module
    or package of its own named ``ablations`` would be imported there instead of the runner."""
    import ablations

    ours = Path(ablations.__file__).resolve().parent
    folder = Path(folder).resolve()
    for found in (folder / "ablations.py", folder / "ablations" / "__init__.py"):
        if found.is_file() and found.resolve().parent != ours:
            shown = found if found.name == "ablations.py" else found.parent
            raise UsageError(f"{shown} would be imported as the runner's package `ablations` "
                             f"on Ray's workers (they import from the folder the experiment "
                             f"starts in): rename it, or start from another folder")


def storage_root(text: str) -> str:
    """The storage as a local absolute path or a URI (s3://, gs://, file://, ...), checked."""
    if is_uri(text):
        scheme, rest = text.split("://", 1)
        if not rest.strip("/"):  # nothing left once the URI's trailing slashes go
            example = "my-bucket/ablations" if scheme in ("s3", "gs", "gcs") \
                else "/data/ablations"
            raise UsageError(f"{arg('storage')} {text} names no "
                             f"{'bucket' if scheme in ('s3', 'gs', 'gcs') else 'folder'}: "
                             f"give one, e.g. {scheme}://{example}")
        if "?" in text:  # the experiment's folder is joined onto the URI: no query there
            raise UsageError(f"{arg('storage')} {text}: options in the URI's query are not "
                             "supported; set them in the environment instead (AWS_ENDPOINT_URL, "
                             "AWS_DEFAULT_REGION, ...: docs/storage.md)")
        try:
            check_bucket(text)
        except (ValueError, OSError, ImportError) as exc:
            first = first_line(exc)
            raise UsageError(f"{arg('storage')} {text}: {first}") from None
        return text.rstrip("/")
    storage = expanded_path(text, arg("storage")).resolve()
    if storage.exists() and not storage.is_dir():
        raise UsageError(f"{arg('storage')} {storage} is a file, not a directory")
    # the folder that holds it, or would: a file on the way, or a folder this process cannot
    # write, is refused here rather than after Ray has started
    existing = next(folder for folder in (storage, *storage.parents) if folder.exists())
    if not existing.is_dir():
        raise UsageError(f"{arg('storage')} {storage}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{arg('storage')} {storage}: {existing} is not writable here; pass "
                         f"a folder you can write to")
    if (storage / "experiment.json").is_file() and ((storage / "trials.parquet").is_file()
                                                    or (storage / "tune").is_dir()):
        raise UsageError(f"{arg('storage')} {storage} is an experiment's folder, not a storage "
                         f"of experiments: pass {arg('storage')} {storage.parent} (with "
                         f"{arg('name')} {storage.name} to resume that one)")
    return str(storage)



def new_experiment_root(storage: str, name: str) -> str:
    """The folder of a new experiment, refused when it already holds something."""
    root = join(storage, check_name(name))
    if list_dir(root):
        raise UsageError(f"{root} already exists; choose another {arg('name')} (resuming "
                         "continues an experiment)")
    return root
