"""Parsers of single user values and the YAML reader, below the trial config.

Each function parses one value a user wrote (a YAML scalar, a ``--set`` string or a Python
value) strictly, or reads a YAML mapping of keys; none knows which keys exist or which section
they belong to (that is ablations/config/keys.py; ``ablations.config`` exports these names).
Every error is a :class:`ConfigError` whose message names the value and the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import yaml

from ablations.model.config import parse_widths as _model_widths

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


_ARG = "\x1f"  # brackets an argument's name in an error's message (see :func:`arg`)
_COMMAND = "\x1e"  # brackets the arguments of a command the text suggests (see :func:`command`)
# The program a suggested command starts with, unless the caller says how it was invoked: the
# command `pip install` puts on the path.
PROGRAM = "run-ablations"
# the command line's flag of an argument, where it is not the argument's name with dashes
FLAGS = {"overrides": "--set", "datasets": "--data"}


def arg(name: str) -> str:
    """An argument's name inside an error message or a note: the library shows ``name``
    (``max_seeds``), the command line its flag (``--max-seeds``, :func:`flag_of`)."""
    return f"{_ARG}{name}{_ARG}"


def flag_of(name: str) -> str:
    """The command line's flag for the argument ``name`` (``max_seeds``: ``--max-seeds``)."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def command(*args: str) -> str:
    """A command of this tool inside a message or a hint (``command("--resume", "--name",
    "x")``): :func:`named` spells it as the user invoked the tool (``run-ablations --resume
    ...`` when installed, ``python run_ablations.py --resume ...`` from a checkout)."""
    import shlex

    return f"{_COMMAND}{shlex.join(args)}{_COMMAND}"


def named(text: str, name_of: Callable[[str], str] = str, program: str = PROGRAM) -> str:
    """``text`` with each :func:`arg` marker replaced by ``name_of(name)`` and each
    :func:`command` by the command line that starts with ``program`` (shell-quoted)."""
    parts = text.split(_COMMAND)
    text = "".join(f"{program} {part}".rstrip() if i % 2 else part
                   for i, part in enumerate(parts))
    parts = text.split(_ARG)
    return "".join(name_of(part) if i % 2 else part for i, part in enumerate(parts))


class NamesArguments:
    """An error whose message names arguments with :func:`arg` and suggests commands with
    :func:`command`: ``str()`` shows the library's names, :meth:`render` with :func:`flag_of`
    the command line's flags (and its program as invoked)."""

    def render(self, name_of: Callable[[str], str], program: str = PROGRAM) -> str:
        return named(super().__str__(), name_of, program)  # type: ignore[misc]

    def __str__(self) -> str:
        return self.render(str)


class ConfigError(NamesArguments, ValueError):
    """A bad configuration value or key; the message names it and the fix."""


def expanded_path(path: str | Path, flag: str) -> Path:
    """``path`` with a leading ``~`` expanded. A ``~user`` that names no user (``~results``
    for ``~/results``) is a one-line ConfigError naming ``flag``, not Path.expanduser's
    RuntimeError."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        given = f"{flag} {path}" if flag else str(path)
        raise ConfigError(f"{given}: {str(path).split('/')[0]} names no user's home folder; "
                          "write ~/... for your own, or the full path") from None


def parse_bool(value: Any, *, name: str = "value") -> bool:
    """true/false/1/0/yes/no in any case (and real booleans); anything else is an error.

    ``bool("False")`` is True; this is the parser that ``type=bool`` should have been.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: {value!r} is not a boolean; use true/false, yes/no or 1/0")


def parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an integer, got a boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None


def parse_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a number, got a boolean {value!r}")
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name}: {value!r} is not a finite number")
    return number


def parse_widths(value: Any, *, name: str = "cnn_widths") -> str:
    """'64,128,256', '64/128/256' or a list of three ints -> canonical '64,128,256'."""
    try:
        return _model_widths(value, name=name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_scalar_names(value: Any, *, name: str = "drop_scalars") -> str:
    """Scalar column names as a YAML list, 'scalar_a,scalar_b' or '' -> the canonical
    'scalar_a,scalar_b' (sorted, each once; '' = none). Whether the data has them is checked
    against the data before any trial starts
    (``ablations.experiment.planning.table_plan.plan_trials``)."""
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        if any("," in item for item in items):
            raise ConfigError(f"{name}: {value!r}: a column name cannot contain a comma")
    elif isinstance(value, dict):
        raise ConfigError(f"{name}: expected column names, got a mapping {value!r}")
    else:
        items = [part.strip() for part in str(value).split(",")]
    names = sorted({item for item in items if item})
    bad = [n for n in names if not n.startswith("scalar_") or n == "scalar_"]
    if bad:
        raise ConfigError(f"{name}: {bad[0]!r} is not a scalar column name; scalar columns "
                          "are named scalar_* (e.g. drop_scalars=scalar_2)")
    return ",".join(names)


# The sources of a trial's randomness, each drawn from its own seed (ablations.config.TrialSeeds):
# init = torch's generator (weight initialisation and dropout), order = each epoch's order of
# the training samples, data = the data draw (synthetic generator, split, caps, normalisation).
SEED_SOURCES = ("init", "order", "data")


def parse_seed_sources(value: Any, *, name: str = "seed_sources") -> str:
    """Which sources vary with the trial's seed: 'init,order', 'init,order,data', 'none', a
    YAML list ... -> the canonical text (sources in SEED_SOURCES order). A source left out is
    held at its value at seed 0; ``source=K`` holds it at seed K (the cells of
    ``--cross-seeds``)."""
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).strip()
    if isinstance(value, dict) or not text:
        raise ConfigError(f"{name}: {value!r}: give sources as text, e.g. init,order (or none)")
    if text == "none":
        return text
    tokens: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        source, eq, held = part.partition("=")
        source = source.strip()
        if source not in SEED_SOURCES:
            raise ConfigError(f"{name}: {part!r} is not a seed source; choose from "
                              f"{', '.join(SEED_SOURCES)} (e.g. init,order), or none")
        if source in tokens:
            raise ConfigError(f"{name}: {source!r} is given twice in {text!r}")
        if eq and not (held.strip().isdigit()):
            raise ConfigError(f"{name}: {part!r}: a held source takes a seed >= 0 "
                              f"({source}=3)")
        tokens[source] = f"{source}={int(held)}" if eq else source
    return ",".join(tokens[s] for s in SEED_SOURCES if s in tokens)


def seed_levels(seed_sources: str, seed: int) -> dict[str, int]:
    """The seed each source draws from at trial seed ``seed``: ``seed`` for a source that
    varies, its held value otherwise (0 when left out). ``seed_sources`` is canonical."""
    levels = dict.fromkeys(SEED_SOURCES, 0)
    if seed_sources != "none":
        for part in seed_sources.split(","):
            source, eq, held = part.partition("=")
            levels[source] = int(held) if eq else seed
    return levels


def at_least(section: Any, minimum: int, *names: str) -> None:
    for name in names:
        if getattr(section, name) < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {getattr(section, name)}")


def one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(allowed)}")


class QuotedText(str):
    """A scalar the YAML file quoted ('010', "off"): text as written, never typed."""


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one mapping of a YAML file (YAML says keys are unique; PyYAML
    would keep the last one without a word)."""


class TextLoader(yaml.BaseLoader):
    """YAML with every scalar as text (``yaml.BaseLoader``: a value is parsed by the key it
    sets, not by YAML 1.1's guesses), quoted ones marked :class:`QuotedText`, and a key given
    twice in a mapping refused (:class:`DuplicateKey`)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(None, None, f"key {key!r} is given twice (lines "
                                   f"{seen[key] + 1} and {key_node.start_mark.line + 1}); "
                                   "keep one", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _text(loader: TextLoader, node: Any) -> str:
    value = loader.construct_scalar(node)
    return QuotedText(value) if node.style in ("'", '"') else value


TextLoader.add_constructor("tag:yaml.org,2002:str", _text)


def yaml_problem(exc: Exception) -> str:
    """A YAML error in a few words: a duplicated key's own message, else where it is."""
    if isinstance(exc, DuplicateKey):
        return str(exc.problem)
    where = getattr(exc, "problem_mark", None)
    return "not valid YAML" + (f" at line {where.line + 1}" if where is not None else "")


def load_yaml_overrides(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of config keys. Scalars stay strings (``yaml.BaseLoader``) so that
    booleans are parsed by :func:`parse_bool` alone: YAML's own ``on``/``off`` are refused."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: config file not found")
    try:
        data = yaml.load(file.read_text(), Loader=TextLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: {yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of config keys at the top level")
    return data


__all__ = ["SEED_SOURCES", "ConfigError", "load_yaml_overrides", "parse_bool",
           "parse_scalar_names", "parse_seed_sources", "parse_widths", "seed_levels"]
