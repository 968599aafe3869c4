"""Planning own code (docs/own-code.md): the model spec of ``--command`` with its keys'
defaults and metrics, the runner's flags own code does not take, and the verdicts' metric
among those the code declares. :mod:`ablations.experiment.prepare` calls these before it
expands the space."""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional

from ablations.experiment.core.design_options import Tuned
from ablations.config import ConfigError, TrialConfig
from ablations.config.code import (
    COMMAND_PREFIX,
    command_from,
    command_of,
    command_spec,
    is_own_code,
)
from ablations.config.metrics import parse_metrics
from ablations.config.plugins import load_plugin
from ablations.experiment.core.request import Request, UsageError, arg, metric_problem
from ablations.search_spaces.files import typed


def command_model(args: Request, space: object, model: str) -> str:
    """The model spec of ``--command`` (its keys' defaults from the space file's
    ``config:`` and ``--set``, its metrics from ``--metrics`` or the space file's)."""
    model = model or ""
    table = command_of(model) if model.startswith(COMMAND_PREFIX) else None
    if model and table is None:
        raise UsageError(f"{arg('command')} ablates a program; {model} is Python code: drop "
                         "one of the two")
    run = args.command if args.command is not None else table.run if table else None
    if run is None:
        raise UsageError(f"{arg('metrics')} declares a program's metrics: give "
                         f"{arg('command')} too")
    defaults = dict(table.defaults) if table else {}
    set_values = {str(key): typed(str(value)) for key, value in args.overrides}
    for field_name in dict.fromkeys(_fields(run)):
        if field_name not in defaults and field_name in set_values:
            defaults[field_name] = set_values[field_name]
    if args.metrics is not None:
        pairs = args.metrics if isinstance(args.metrics, Mapping) else _metric_pairs(args.metrics)
        metrics = parse_metrics(pairs, source=arg("metrics"))
    elif table is not None:
        metrics = table.metrics
    else:
        raise UsageError(f"{arg('command')}: declare the program's metrics, e.g. "
                         f"{arg('metrics')} test_acc:higher,test_loss:lower:nats")
    try:
        command = command_from(run, defaults, metrics, source=arg("command"),
                               values={key: form for key, form in table.forms.items()
                                       if key in defaults} if table else None)
        if table is not None and table.printed and args.metrics is None:
            # the space file's metrics keep where the program prints them
            command = dataclasses.replace(command, printed=dict(table.printed))
        return command_spec(command)
    except ConfigError as exc:
        raise UsageError(f"{exc}; or {arg('overrides')} KEY=VALUE gives a key's default") \
            from None


def _fields(run: str) -> list[str]:
    return re.findall(r"\{([A-Za-z_]\w*)(?::[^{}\s]+)?\}", run)


def _metric_pairs(text: str) -> dict[str, str]:
    """``"test_acc:higher,test_loss:lower:nats"`` -> ``{test_acc: "higher", test_loss:
    "lower nats"}``."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, rest = item.partition(":")
        if name.strip() in pairs:
            raise UsageError(f"{arg('metrics')}: {name.strip()} is declared twice; declare each "
                             "metric once, with its one direction")
        pairs[name.strip()] = rest.replace(":", " ").strip()
    return pairs


def refuse_runner_flags(args: Request, model: Optional[str]) -> None:
    """Refuse the flags that set the runner's data and training keys when ``model`` is own
    code, which loads and trains on its data itself."""
    if not model or not is_own_code(load_plugin(model)):
        return
    given = [name for name in ("data", "auto_batch", "max_train_examples", "max_eval_examples")
             if getattr(args, name) not in (None, False)]
    given += ["tune_each"] if isinstance(args.design, Tuned) else []
    if given:
        raise UsageError(f"{arg(given[0])} applies to the built-in model and plugins; own code "
                         "loads and trains on its data itself: drop it")


def with_metric(args: Request, base: TrialConfig) -> Request:
    """``args`` with the verdicts' metric checked against the model's: own code's first
    declared metric where none was given, else the one given, which must be declared; the
    built-in model's and plugins' metrics are trials.parquet's columns."""
    code = base.own_code
    if code is None:
        problem = metric_problem(args.metric)
        if problem:
            raise UsageError(f"{arg('metric')}: {problem}")
        return args
    if "metric" not in args.given:
        return dataclasses.replace(args, metric=code.primary_metric)
    problem = metric_problem(args.metric, list(code.metrics))
    if problem:
        raise UsageError(f"{arg('metric')}: {problem}")
    return args
