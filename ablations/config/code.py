"""Own training code as a model the runner ablates: a training function, a command, or a
kind of one's own (:class:`OwnCode`, its contract in ablations/trial/contracts.py).

``--model package.module:NAME`` names a :class:`ModelPlugin` (ablations/config/plugins.py), or
one of these:

- :class:`TrainingFunction`: ``fit(config, trial) -> metrics``, with ``config`` an instance of
  the user's frozen dataclass of keys and defaults (the ablation table's keys), ``trial`` an
  :class:`ablations.trial.own_code.Trial` (seeds, ``report``, ``save`` / ``restore``,
  device, predictions) and the metrics it returns a mapping of name -> number.
- :class:`Command`: any program, run once per trial with its config filled into a command
  line (``python train.py --lr {lr} --seed {seed}``) and the environment, its metrics read
  from a JSON-lines file it writes, its last JSON line, or the lines it prints by a pattern
  per metric (ablations/config/printed.py; ablations/trial/command.py).

Both declare their metrics (:func:`ablations.config.metrics.parse_metrics`): a direction, and
a unit the report prints. The user's keys are the trial's config keys; the runner's own keys
(``lr``, ``epochs``, ``batch_size``, ...) do not apply to own code, so a user key may have the
same name. A command is carried to the workers as its spec, ``command:<JSON>``
(:func:`command_spec`), so that nothing has to be importable there.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ablations.config.metrics import Metric, parse_metrics
from ablations.config.metric_files import KINDS, file_source
from ablations.config.printed import printed_pattern
from ablations.config.value_forms import value_forms
from ablations.config.values import ConfigError

COMMAND_PREFIX = "command:"
SOURCE_KEYS = ("printed", *KINDS, "key")  # where a command's metric is read from
# What the runner fills into a command line beside the user's keys (ablations/trial/command.py)
COMMAND_FIELDS = ("seed", "init_seed", "order_seed", "data_seed", "trial", "ablation", "dataset",
                  "trial_dir", "metrics_file", "resume_dir", "device",
                  "python",  # the Python that runs the trial: the runner's, on every node
                  "port",  # a free TCP port on the trial's node (a launcher's rendezvous)
                  "gpus")  # the GPUs Ray gave the trial (CUDA_VISIBLE_DEVICES names them)
FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A flag that is there or not: {standardize:--standardize} is --standardize where the boolean
# key standardize is true, and nothing where it is false (an argument left empty is dropped).
FLAG = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*):([^{}\s]+)\}")
# What a user may mean as a field but is neither form: {lr:.3f} of a number, { lr }, {0},
# {cfg!r}. Braces around anything else (a JSON or a dict literal in a `python -c`) are the
# program's text.
PLACEHOLDER_LIKE = re.compile(r"\{\s*\w+\s*(?:[:!][^{}'\"]*)?\}")


# The runner's systems keys own code can take (``trial.switches``), with what planning records
# of a setting it mapped: own code's columns in trials.parquet beside its keys
OWN_CODE_SWITCHES = ("precision", "compile", "gradient_checkpointing", "channels_last",
                     "precision_requested", "compile_requested")
# The runner's keys own code's trials also take: the identity, the switches, and what the runner
# sets itself (threads, device, --resolve-conflicts)
OWN_CODE_RUNNER_KEYS = frozenset({"ablation", "dataset", "seed", "seed_offset", "seed_sources",
                                  *OWN_CODE_SWITCHES, "num_threads", "device",
                                  "resolve_conflicts"})
# Names that are trials.parquet's own columns or a result's record: no key or metric of own
# code may take one (its column would overwrite, or be overwritten by, the runner's)
RESERVED = frozenset({
    *OWN_CODE_RUNNER_KEYS, "model", "plugin", "experiment", "space", "trial_name", "trial_id",
    "status", "failure_reason", "error", "epoch", "epochs_run", "resumed_from_epoch", "round",
    "phase", "wall_s", "cpu_hours", "gpu_hours", "device_used", "device_name", "final",
    "own_metrics", "reported_at", "started_at", "data_source", "data_fingerprint",
    "code_fingerprint", "trial_key", "reused_from", "init_seed", "order_seed", "data_seed",
    "torch_version", "ray_version", "python_version", "git_commit", "precision_used",
    "compile_used"})
KEY_TYPES = (bool, int, float, str)  # a key's default: one of these (a YAML scalar)
# the runner names each trial's dataset (docs/datasets.md); own code selects it by its own key
DATASET_HINT = (" (e.g. data_name) and name the datasets in the space file: datasets: "
                "{a: {data_name: a}, b: {data_name: b}}")


def key_value(value: Any) -> bool:
    """True for what a config key holds: a scalar (:data:`KEY_TYPES`), or a list or mapping
    of them (``widths: [8, 16]``), as YAML and JSON write them (a tuple is not: JSON would
    give it back as a list, another value)."""
    if isinstance(value, list):
        return all(isinstance(item, KEY_TYPES) for item in value)
    if isinstance(value, dict):
        return all(isinstance(item, KEY_TYPES) for item in value.values())
    return isinstance(value, KEY_TYPES)


def flag_kept(key: str) -> str:
    """The fix for a command's key whose name the runner takes: another key, the program's
    flag unchanged."""
    other = {"model": "arch", "dataset": "data_name", "seed": "my_seed"}.get(key, f"{key}_value")
    return (f"name the key otherwise and keep the program's flag: config: {{{other}: ...}} and "
            f"--{key.replace('_', '-')} {{{other}}} on the command line")


def check_names(name: str, keys: Mapping[str, Any], metrics: Mapping[str, Any], *,
                command: bool = False) -> None:
    """Own code's keys (name -> default) and metrics: no runner's column among them, no
    metric named like a key, every default a single value.

    Raises:
        ConfigError: the first name or default that is not allowed, and why.
    """
    for key, value in keys.items():
        if key in RESERVED:
            fix = flag_kept(key) if command else "rename it"
            raise ConfigError(f"{name}: config key {key!r} is one of the runner's columns; "
                              f"{fix}{DATASET_HINT if key == 'dataset' else ''}")
        if not key_value(value):
            raise ConfigError(f"{name}: config key {key}: its default {value!r} is not a "
                              "boolean, integer, float or string, or a list or mapping of them")
    for metric in metrics:
        if metric in RESERVED or metric in keys:
            what = "a config key" if metric in keys else "one of the runner's columns"
            raise ConfigError(f"{name}: metric {metric!r} is {what}; rename it")


class OwnCode:
    """What every kind of own code declares, whatever trains its trials: ``name`` (the
    console's and trials.parquet's ``model``), ``config`` (a frozen dataclass of its keys with
    their defaults: a space's variants are diffs of these keys) and ``metrics`` (name ->
    :class:`Metric`, the first the verdicts' default). A kind of own code is a frozen dataclass
    subclassing this one; its contract (ablations/trial/contracts.py) says how a trial of it
    trains. :class:`TrainingFunction` and :class:`Command` are the built-in kinds."""

    name: str
    config: type
    metrics: Mapping[str, Metric]

    def check(self) -> None:
        """Parse the declared metrics (in place) and refuse, in one line each, a config that
        is no dataclass, a key without a default and a key or metric the runner's names take:
        a dataclass kind calls it from its ``__post_init__``.

        Raises:
            ConfigError: naming the model and the key or metric.
        """
        object.__setattr__(self, "metrics", parse_metrics(self.metrics,
                                                          source=f"model {self.name}: metrics"))
        if not dataclasses.is_dataclass(self.config):
            raise ConfigError(f"model {self.name}: config must be a dataclass of its keys")
        defaults = {}
        for field in dataclasses.fields(self.config):
            if field_default(field) is dataclasses.MISSING:
                raise ConfigError(f"model {self.name}: config key {field.name!r} has no "
                                  "default; give every key one")
            defaults[field.name] = field_default(field)
        check_names(f"model {self.name}", defaults, self.metrics)

    @property
    def primary_metric(self) -> str:
        return next(iter(self.metrics))


@dataclass(frozen=True)
class TrainingFunction(OwnCode):
    """A training function the runner ablates; see the module docstring.

    Args:
        name: what the console and trials.parquet's ``model`` column call it.
        config: a frozen dataclass of the function's keys with their defaults; a space's
            variants are diffs of these keys. Booleans, integers, floats and strings.
        fit: ``fit(config, trial)``; returns the final metrics (name -> number).
        metrics: name -> direction (``"higher"`` / ``"lower"``, ``"lower nats"``, a
            :class:`Metric` of that name or ``{direction:, unit:}``), or a list of
            :class:`Metric` values. The first is the verdicts' default metric.
    """

    name: str
    config: type
    fit: Callable[[Any, Any], Mapping[str, Any]]
    metrics: Mapping[str, Any] | Sequence[Metric]

    def __post_init__(self) -> None:
        self.check()


@dataclass(frozen=True)
class Command(OwnCode):
    """A program the runner ablates: ``run`` is its command line with ``{key}`` fields (the
    user's keys in ``defaults``, and the runner's: :data:`COMMAND_FIELDS`)."""

    run: str
    defaults: Mapping[str, Any]
    metrics: Mapping[str, Metric]
    name: str = "command"
    # metric -> the pattern its value is printed in (ablations/config/printed.py); the others
    # come from the metrics file or the last JSON line
    printed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # key -> the form its value is written in where not YAML's (ablations/config/value_forms.py)
    forms: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # metric -> the log file it is read from once the program ends, {"kind", "path", "key"}
    # (ablations/config/metric_files.py)
    files: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    @property
    def config(self) -> type:
        """A frozen dataclass of the command's keys with their defaults (its type from the
        default's: ``{hidden: 64}`` makes an int key)."""
        return _command_config(command_spec(self))

    def fields(self) -> list[str]:
        """The keys its command line names, as {key} or {key:--flag}."""
        return FIELD.findall(self.run) + [key for key, _ in FLAG.findall(self.run)]


def command_from(run: str, defaults: Mapping[str, Any] | None, metrics: Mapping[str, Any],
                 *, source: str = "command", values: Any = None) -> Command:
    """A checked :class:`Command`: every ``{field}`` of ``run`` is a key of ``defaults`` or
    the runner's; the defaults are single values; ``values``: the space file's ``values:``,
    the form each key is written in (:func:`~ablations.config.value_forms.value_forms`).

    Raises:
        ConfigError: one line naming the problem and the fix.
    """
    run = str(run or "").strip()
    if not run:
        raise ConfigError(f"{source}: an empty command line; give e.g. "
                          "'python train.py --lr {lr} --seed {seed}'")
    defaults = dict(defaults or {})
    for key, value in defaults.items():
        if not FIELD.fullmatch("{" + str(key) + "}"):
            raise ConfigError(f"{source}: config key {key!r} is not an identifier")
        if key in COMMAND_FIELDS:
            raise ConfigError(f"{source}: config key {key!r} is filled in by the runner; "
                              f"{flag_kept(key)}"
                              f"{'; or' + DATASET_HINT if key == 'dataset' else ''}")
    try:
        shlex.split(run)
    except ValueError as exc:  # an unclosed quote
        raise ConfigError(f"{source}: {run!r} is not a command line ({exc})") from None
    for attempt in PLACEHOLDER_LIKE.finditer(run):
        text = attempt.group(0)
        flag = FLAG.fullmatch(text)
        if flag and not isinstance(defaults.get(flag.group(1)), bool):
            what = (f"{flag.group(1)} is a {type(defaults[flag.group(1)]).__name__}"
                    if flag.group(1) in defaults else f"{flag.group(1)} has no default")
            raise ConfigError(f"{source}: {text} in the command line: {{key:TEXT}} gives TEXT "
                              f"where a boolean key is true and nothing where it is false, and "
                              f"{what}; give {flag.group(1)} a default of true or false, or "
                              "format a number in the program")
        if not flag and not FIELD.fullmatch(text):
            raise ConfigError(f"{source}: {text} in the command line: a field is {{key}} "
                              "alone, or {key:--flag} for a flag there when a boolean key is "
                              "true (no spaces, format spec or index)")
    unknown = [f for f in FIELD.findall(run) if f not in defaults and f not in COMMAND_FIELDS]
    if unknown:
        raise ConfigError(f"{source}: {{{unknown[0]}}} in the command line is not a config key; "
                          f"give it a default in the space file's config: ({unknown[0]}: ...), "
                          f"or use one of the runner's: {', '.join(COMMAND_FIELDS)}")
    printed, files, declared = {}, {}, {}
    for name, value in (metrics.items() if isinstance(metrics, Mapping) else ()):
        if isinstance(value, Mapping):
            found = file_source(str(name), value, source=f"{source}: metrics")
            if found is not None:
                files[str(name)] = found
            if "printed" in value:
                printed[str(name)] = printed_pattern(str(name), value["printed"],
                                                     source=f"{source}: metrics")
            value = {key: item for key, item in value.items() if key not in SOURCE_KEYS}
        declared[name] = value
    parsed = parse_metrics(declared if isinstance(metrics, Mapping) else metrics,
                           source=f"{source}: metrics")
    check_names(source, defaults, parsed, command=True)
    forms = value_forms(values, defaults, source=source)
    return Command(run=run, defaults=defaults, metrics=parsed, printed=printed, forms=forms,
                   files=files)


def command_spec(command: Command) -> str:
    """The ``model`` spec that carries ``command`` to the workers: ``command:<JSON>``."""
    metrics = {name: {**metric.record(), **_source_record(command, name)}
               for name, metric in command.metrics.items()}
    return COMMAND_PREFIX + json.dumps(
        {"run": command.run, "config": dict(command.defaults), "metrics": metrics,
         **({"values": dict(command.forms)} if command.forms else {})},
        sort_keys=True, separators=(",", ":"))


def _source_record(command: Command, name: str) -> dict[str, str]:
    """Where metric ``name`` is read from, as its declaration says it: ``printed:``, or a
    file's ``csv:`` / ``json:`` / ``tensorboard:`` with ``key:``; {} for the metrics file."""
    if name in command.printed:
        return {"printed": command.printed[name]}
    if name in command.files:
        spec = command.files[name]
        return {spec["kind"]: spec["path"], **({"key": spec["key"]} if spec["key"] != name
                                               else {})}
    return {}


def command_of(spec: str) -> Command:
    """The :class:`Command` a ``command:<JSON>`` spec carries."""
    values = json.loads(spec[len(COMMAND_PREFIX):])
    return command_from(values["run"], values["config"], values["metrics"],
                        values=values.get("values"))


_CONFIGS: dict[str, type] = {}


def _command_config(spec: str) -> type:
    if spec not in _CONFIGS:
        defaults = json.loads(spec[len(COMMAND_PREFIX):])["config"]
        _CONFIGS[spec] = dataclasses.make_dataclass(
            "CommandConfig", [(key, type(value), _default(value))
                              for key, value in defaults.items()], frozen=True)
    return _CONFIGS[spec]


def field_default(field: dataclasses.Field) -> Any:
    """A config field's default (made by its factory for a list or a mapping), MISSING where
    it has none."""
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _default(value: Any) -> Any:
    """A config key's field: a list or mapping (``widths: [8, 16]``) made afresh for each
    config, as a dataclass takes a mutable default; any other value as it is."""
    if isinstance(value, (list, dict)):
        return dataclasses.field(default_factory=lambda: json.loads(json.dumps(value)))
    return dataclasses.field(default=value)


def is_own_code(model: Any) -> bool:
    """True for own code of any kind (a training function, a command, a kind of one's own),
    not a model plugin."""
    return isinstance(model, OwnCode)


__all__ = ["COMMAND_FIELDS", "FIELD", "FLAG", "OWN_CODE_RUNNER_KEYS", "OWN_CODE_SWITCHES",
           "RESERVED",
           "Command", "Metric", "OwnCode", "TrainingFunction", "command_from",
           "command_of", "command_spec", "field_default", "is_own_code", "key_value"]
