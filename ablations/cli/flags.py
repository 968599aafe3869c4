"""The command line's flags: the run command's flags in groups (a design's own flags as its
options declare them, core/design_options.py), and the parser and help layout every subcommand
shares (the subcommands themselves: commands.py; the flags' value types: flag_types.py)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from typing import Any, NoReturn, Optional

from ablations.cli.flag_types import (
    alpha_flag,
    bool_flag,
    duration,
    int_at_least,
    key_value,
    log_to_flag,
    margin_flag,
    metric_flag,
    non_negative_int,
    positive_int,
    rate_flag,
    resource,
    seed_sources_flag,
    seeds_flag,
)
from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_METRIC
from ablations.experiment.core.design_options import (
    BUILT_IN_OPTIONS,
    DesignOptions,
    Factorial,
    Rounds,
    Search,
    Tuned,
)
from ablations.experiment.core.request import DEFAULT_STORAGE, Request

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def invoked_as(argv0: str) -> tuple[str, str]:
    """How the user started the tool, from ``sys.argv[0]``: (its name in error lines and usage,
    the command line a suggested command starts with). ``run-ablations`` is the installed
    command; ``python -m ablations.cli`` the module; anything else (the checkout's
    ``run_ablations.py``, or ``main()`` called from Python) the checkout's script, as typed."""
    name = os.path.basename(argv0)
    if name == "run-ablations":
        return name, name
    if name == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "cli":
        return "python -m ablations.cli", "python -m ablations.cli"
    script = argv0 if name == "run_ablations.py" else "run_ablations.py"
    return "run_ablations.py", shlex.join(["python", script])


# The program's name in error lines and usage, and the start of each command it suggests
PROG, PROGRAM = invoked_as(sys.argv[0] if sys.argv and sys.argv[0] else "run_ablations.py")



class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``NAME: error: ... (see PROG --help)``) and exit
    code 2. ``name``: the start of its error lines (default: ``prog``); ``run``'s is
    ``run_ablations.py``, as it is typed without its name."""

    def __init__(self, *args: Any, name: Optional[str] = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpLayout)
        super().__init__(*args, **kwargs)
        self.name = name or self.prog

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.name}: error: {message} (see {self.prog} --help)\n")


class HelpLayout(argparse.RawDescriptionHelpFormatter):
    """``--help``'s layout: descriptions and epilogs as written (their example commands keep
    their lines), and each flag's default after its help where the help does not already say
    it (none for a switch, which is off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return help_with_default(action)


def help_with_default(action: argparse.Action) -> str:
    """A flag's help as ``--help`` shows it (before argparse fills in ``%(default)s``)."""
    text = action.help or ""
    default = getattr(action, "shown_default", action.default)
    if (not action.option_strings or action.nargs == 0 or "default" in text
            or default in (None, [], argparse.SUPPRESS)):
        return text
    return f"{text} (default: {str(default).replace('%', '%%')})"


def given_only(parser: argparse.ArgumentParser, dests: set[str]) -> None:
    """The flags of ``dests`` leave no value in the parsed namespace unless the command line
    gives them (``argparse.SUPPRESS``), so that the namespace says what was given; their
    defaults stay the help's (``shown_default``) and the library's (the fields of
    :class:`~ablations.experiment.core.request.Request`)."""
    for action in parser._actions:  # argparse keeps no public list of its actions
        if action.dest in dests and action.option_strings:
            action.shown_default = action.default  # type: ignore[attr-defined]
            action.default = argparse.SUPPRESS


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``run``, in groups; their dest names are the fields of
    :class:`~ablations.experiment.core.request.Request` and of the run's options."""
    add_what_flags(parser)
    add_seed_flags(parser)
    add_config_flags(parser)
    add_resource_flags(parser)
    add_output_flags(parser)
    add_resume_flags(parser)
    given_only(parser, {field.name for field in dataclasses.fields(Request)}
               | {flag.dest for options in BUILT_IN_OPTIONS for flag in options.flags})


def add_design_flags(group: Any, options: type[DesignOptions]) -> None:
    """The flags ``options`` declares (core/design_options.py's Flag), as flags of ``group``:
    ``--dest-with-dashes``, an integer >= its minimum, one of its choices, or text."""
    for flag in options.flags:
        kind = ({"type": int_at_least(flag.at_least)} if flag.at_least is not None else
                {"choices": list(flag.choices)} if flag.choices else {})
        group.add_argument("--" + flag.dest.replace("_", "-"), default=flag.default,
                           metavar=flag.metavar, help=flag.help, **kind)


def add_what_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of what to run: the space, the code, the design."""
    what = parser.add_argument_group("what to run")
    what.add_argument("--space", default="components", metavar="NAME|FILE.yaml",
                      help=f"a built-in search space (`{PROG} list` shows them) or an "
                      "ablation table in a YAML file, docs/spaces.md")
    what.add_argument("--model", default=None, metavar="PACKAGE.MODULE:NAME",
                      help="code to ablate instead of the built-in model: a training function "
                      "(a TrainingFunction whose fit(config, trial) trains one trial, "
                      "docs/own-code.md) or a model plugin (docs/plugins.md), e.g. "
                      "examples.digits.fit:DIGITS; a space file's model: key does the same "
                      "(default: the built-in multimodal model)")
    what.add_argument("--command", default=None, metavar="'PROGRAM ARGS {key}'",
                      help="a program to ablate (docs/own-code.md): its command line, {key} "
                      "filled with each trial's config keys ({seed}, {metrics_file}, "
                      "{resume_dir}, ... by the runner); a space file's command: key does "
                      "the same (default: none)")
    what.add_argument("--metrics", default=None, metavar="NAME:DIRECTION[:UNIT],...",
                      help="with --command: the program's metrics, e.g. "
                      "test_acc:higher,test_loss:lower:nats; the first is the verdicts' "
                      "default --metric (default: the space file's metrics:)")
    what.add_argument("--only", default=None, metavar="VARIANT[,VARIANT]",
                      help="run only these variants of the space; the reference is added "
                      "(default: every variant)")
    what.add_argument("--design", default="table", metavar="DESIGN",
                      help="table: the space's variants; factorial: the cells of a two-level "
                      "design over --factors, the space's reference variant as the reference "
                      "cell, every cell at every seed, main effects and two-factor "
                      "interactions at the end (docs/factorial.md); or a design of your own, "
                      "package.module:Class (docs/architecture.md)")
    for options in (Factorial, Tuned, Search):
        add_design_flags(what, options)
    what.add_argument("--null-control", action="store_true",
                      help="add <reference>_repeat: the reference under other seeds (training "
                      "seed + 1000, paired by seed), a variant whose true effect is 0")
    what.add_argument("--dry-run", action="store_true",
                      help="print the trials and their resolved configs; run nothing")


def add_seed_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of the seeds and how the verdicts are decided."""
    seeds = parser.add_argument_group("seeds and decisions")
    seeds.add_argument("--seeds", type=seeds_flag, default=[0, 1, 2], metavar="N|S1,S2,...|auto",
                       help="number of seeds (3 = seeds 0,1,2) or an explicit list; the same "
                       "seeds run for every variant (default: 3). auto: a pilot of --pilot "
                       "seeds, then more seeds in rounds only for variants without a verdict, "
                       "up to --max-seeds (docs/verdicts.md)")
    add_design_flags(seeds, Rounds)
    seeds.add_argument("--seed-sources", type=seed_sources_flag, default=None,
                       metavar="init,order,data|none",
                       help="the sources of randomness that vary with the trial's seed: init "
                       "(weight initialisation and dropout), order (each epoch's sample "
                       "order), data (the data draw); a source left out is held at its seed-0 "
                       "value (default: init,order,data, or the config key seed_sources; "
                       "docs/seed-sources.md)")
    seeds.add_argument("--cross-seeds", action="store_true",
                       help="run each variant's seeds as a grid of the two varying sources "
                       "(--seeds 3: 3 x 3 trials, every init seed with every order seed, each "
                       "cell its own pairing seed), so the report splits the seed variance by "
                       "source (docs/seed-sources.md)")
    seeds.add_argument("--metric", type=metric_flag, default=DEFAULT_METRIC,
                       help="the metric of the verdicts (and of --seeds auto's decisions), a "
                       "numeric column of trials.parquet such as test_rmse, test_nll, val_mae "
                       "(default: test_mae for the built-in model; own code's first declared "
                       "metric)")
    seeds.add_argument("--margin", type=margin_flag, default=None, metavar="M|P%",
                       help="equivalence margin of the end-of-run verdicts: metric units (0.02) "
                       "or a percentage of the reference's mean (default: 5%%)")
    seeds.add_argument("--alpha", type=alpha_flag, default=DEFAULT_ALPHA,
                       help="family-wise error rate of the verdicts")
    seeds.add_argument("--max-failure-rate", type=rate_flag, default=None, metavar="R|P%",
                       help="tolerance for divergence: a variant is equivalent only where the "
                       "one-sided upper bound on its rate of diverged runs is below it, e.g. "
                       "10%% (default: none; docs/verdicts.md)")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of the base configuration and the data."""
    config = parser.add_argument_group("configuration")
    config.add_argument("--config", default=None, metavar="FILE.yaml|PRESET",
                        help="base configuration: a YAML mapping of config keys, or a preset "
                        "name: full_optimized, full_stable, memory_optimized (default: the "
                        "built-in defaults)")
    config.add_argument("--set", dest="overrides", type=key_value, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="override one config key, after --config and the other flags "
                        "(repeatable; default: none)")
    config.add_argument("--epochs", type=positive_int, default=None, metavar="N",
                        help="epochs per trial (default: the configuration's, 4 built in)")
    config.add_argument("--data", default=None, action="append", metavar="[NAME=]DIR",
                        help="directory with images.npy and table.parquet, or 'synthetic' "
                        "(default: the embedded synthetic data); repeat it to ablate on "
                        "several datasets, each named NAME or by its directory "
                        "(docs/datasets.md)")
    config.add_argument("--max-train-examples", type=non_negative_int, default=None,
                        metavar="N", help="use at most N training samples (0: all; default: "
                        "the configuration's, all)")
    config.add_argument("--max-eval-examples", type=non_negative_int, default=None,
                        metavar="N", help="use at most N validation and N test samples (0: "
                        "all; default: the configuration's, all)")
    config.add_argument("--resolve-conflicts", action="store_true",
                        help="map unsafe switch combinations to the nearest safe setting (with "
                        "a warning) instead of refusing them")
    config.add_argument("--auto-batch", action="store_true",
                        help="probe the largest batch whose training step fits the trial's GPU "
                        "(one step per size, on a worker with the trial's resources) and use "
                        "it")


def add_resource_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of the trials' resources and the cluster."""
    where = parser.add_argument_group("resources and cluster")
    where.add_argument("--address", default=None, metavar="auto|HOST:PORT|ray://HOST:PORT",
                       help="an existing Ray cluster (default: start a local Ray)")
    where.add_argument("--cpus-per-trial", type=resource, default=1.0, metavar="N",
                       help="CPUs per trial; the trial uses that many threads (default: 1)")
    where.add_argument("--gpus-per-trial", type=resource, default=0.0, metavar="N",
                       help="GPUs per trial, fractions allowed, e.g. 0.5 (default: 0)")
    where.add_argument("--max-concurrent", type=non_negative_int, default=0, metavar="N",
                       help="at most N trials at once (default: 0, as resources allow)")
    where.add_argument("--time-limit", type=duration, default=None, metavar="DURATION",
                       help="end each run of a trial past this time, as status 'timeout' "
                       "with its last output: seconds, or e.g. 90s, 15m, 2h (default: the "
                       "space file's time_limit, else none)")
    where.add_argument("--max-failures", type=non_negative_int, default=0, metavar="N",
                       help="retry a failed trial up to N times, from its last checkpoint "
                       "(default: 0)")
    where.add_argument("--dashboard", type=bool_flag, default=True, metavar="BOOL",
                       help="start the Ray dashboard on 127.0.0.1 with a local Ray "
                       "(default: true)")
    where.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                       help="same as --dashboard false")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of where the results go, what is printed and tracked."""
    output = parser.add_argument_group("output and tracking")
    output.add_argument("--storage", default=DEFAULT_STORAGE, metavar="DIR|URI",
                        help="results root: a path or a URI such as s3://bucket/results; the "
                        "experiment's folder is STORAGE/NAME")
    output.add_argument("--name", default=None,
                        help="experiment name; an existing one with the same plan is resumed, "
                        "with another plan refused (default: SPACE-YYYYmmdd-HHMMSS)")
    output.add_argument("--quiet", action="store_true",
                        help="no progress lines (the summary stays)")
    output.add_argument("--progress", choices=("trials", "epochs"), default="trials",
                        help="trials: a line per finished trial and a status line with an ETA "
                        "every 30 s; epochs: also a line per trial per epoch")
    output.add_argument("--log-to", type=log_to_flag, action="append", default=[],
                        metavar="mlflow[:URI]|wandb[:PROJECT]",
                        help="also log every trial (its config, per-epoch metrics, tags) and "
                        "the verdicts to a tracker, through Ray Tune's callbacks (repeatable; "
                        "docs/trackers.md): mlflow (default store: the experiment's "
                        "mlruns/mlflow.db) or wandb (default project: ablation-runner)")
    output.add_argument("--verbose", action="store_true",
                        help="Ray Tune's live trial table and per-trial results (every "
                        "figure: Tune then analyses each, more driver memory and larger "
                        "experiment-state snapshots per trial), and what the trials print "
                        "(else in each trial's folder: stdout, stderr)")


def add_resume_flags(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags of resuming an experiment."""
    resume = parser.add_argument_group("resume")
    resume.add_argument("--resume", action="store_true",
                        help="continue the experiment --name (default: the newest in "
                        "--storage) from where it stopped; finished trials are kept; with "
                        "--space, a finished table plus new variants trains only those")
    resume.add_argument("--retry-failed", action="store_true",
                        help="with --resume: retry failed trials from their last checkpoint")
    resume.add_argument("--allow-changed", action="store_true",
                        help="resume (--resume, or the same --name) even though the code or "
                        "the data changed since the experiment started; what changed is "
                        "printed and kept in experiment.json")
    resume.add_argument("--no-reuse", dest="reuse", action="store_false",
                        help="train every trial, even those another experiment under "
                        "--storage finished with the same configuration, seeds, data, code "
                        "and versions (by default their rows are reused and marked "
                        "reused_from in trials.parquet)")
