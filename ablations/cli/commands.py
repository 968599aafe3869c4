"""The subcommands (``run``, ``report``, ``compare``, ``list``, ``diagnose``): each one's
parser with its own ``--help``, and the top-level parser whose ``--help`` lists them.

``run`` is the default: a command line that does not start with a subcommand's name is run's
(``run_ablations.py --space components`` is ``run_ablations.py run --space components``).
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from typing import Callable, Sequence

from ablations.cli.console import error_text
from ablations.cli.flag_types import alpha_flag, margin_flag
from ablations.cli.flags import PROG, OneLineParser, add_design_flags, add_run_flags, given_only
from ablations.experiment.core.design_options import DesignOptions, names_own_design
from ablations.experiment.core.request import UsageError

DEFAULT_COMMAND = "run"
HELP = ("-h", "--help")


def _report_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", metavar="EXPERIMENT_DIR|URI",
                        help="an experiment folder, or its URI (file://..., s3://bucket/...)")
    parser.add_argument("--reference", default=None,
                        help="variant the others are compared with (default: the "
                        "experiment's, e.g. baseline)")
    parser.add_argument("--metric", default=None,
                        help="trials column to compare (default: the one the run recorded "
                        "before its data, else test_mae; e.g. test_rmse, test_nll, val_mae, "
                        "test_r2: worse/better follow its direction)")
    parser.add_argument("--margin", type=margin_flag, default=None, metavar="X|P%",
                        help="equivalence margin: in the metric's units (0.02) or a percentage "
                        "of the reference's mean (default: the one the run recorded before its "
                        "data, else 5%%)")
    parser.add_argument("--alpha", type=alpha_flag, default=None,
                        help="family-wise error rate of each kind of verdict (default: the one "
                        "the run recorded before its data, else 0.05)")
    parser.add_argument("--format", action="append", choices=("latex", "markdown", "csv"),
                        default=None, dest="formats",
                        help="also write the ablation table for a paper: latex (table.tex, "
                        "booktabs), markdown (table.md) or csv (table.csv); give it again for "
                        "another (default: none)")
    # the choices: results/report/plots.py's FIGURES (tests/test_report_cli.py checks)
    parser.add_argument("--figures", choices=("all", "png"), default="all",
                        help="all: each figure as the PNG the report shows and as PDF and SVG "
                        "at the report's, a page's and a column's width, for a paper; png: the "
                        "PNGs alone, a quicker report, removing earlier PDFs and SVGs of its "
                        "figures (default: all)")
    parser.add_argument("--compare-with", default=None, metavar="EXPERIMENT_DIR|URI",
                        help="add a section comparing this experiment with another, variant by "
                        "variant, as `compare OTHER THIS` (default: none)")


def _compare_flags(parser: argparse.ArgumentParser) -> None:
    # results/stats/compare.py: a percentage margin is of each variant's own mean in A, tested
    # as the ratio of its mean in B to its mean in A; the reference only has to be above 0
    parser.add_argument("a", metavar="EXP_A", help="the first experiment folder (or URI)")
    parser.add_argument("b", metavar="EXP_B", help="the second experiment folder (or URI)")
    parser.add_argument("--metric", default=None,
                        help="trials column (default: A's planned metric, else test_mae)")
    parser.add_argument("--margin", type=margin_flag, default=None, metavar="X|P%",
                        help="the smallest change that matters: in the metric's units (0.02), "
                        "or a percentage of each variant's own mean in A, tested as the ratio "
                        "of its mean in B to its mean in A (default: A's planned margin, else "
                        "5%%)")
    parser.add_argument("--alpha", type=alpha_flag, default=None,
                        help="family-wise error rate of each kind of verdict (default: A's "
                        "planned alpha, else 0.05)")
    parser.add_argument("--reference", default=None,
                        help="with a percentage margin, A's mean of this variant must be above "
                        "0, or the margin is refused (default: A's reference, else baseline)")


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """``list`` takes none."""


def _diagnose_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT|ray://HOST:PORT",
                        help="the Ray cluster whose resources to show (default: start a "
                        "private local Ray)")


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in the top-level ``--help``, the description and epilog of its
    own ``--help``, and what adds its arguments."""

    summary: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    epilog: str = ""


COMMANDS: dict[str, Command] = {
    "run": Command(
        "run an experiment or resume one (the default subcommand)",
        "Run the ablations of a search space on Ray Tune, every variant over the same seeds; "
        "results in Parquet under STORAGE/NAME/, and the verdicts against the reference at the "
        f"end. The default subcommand: `{PROG} --space components` is "
        f"`{PROG} run --space components`.",
        add_run_flags,
        "examples:\n"
        f"  {PROG} --space components                  # 9 variants x 3 seeds\n"
        f"  {PROG} --space components --dry-run        # the trials; run nothing\n"
        f"  {PROG} --space components --seeds auto     # seeds in rounds\n"
        f"  {PROG} --resume --name NAME --storage DIR  # continue an experiment\n"
        f"then: {PROG} report STORAGE/NAME"),
    "report": Command(
        "write a finished experiment's report.md and report.html; print its verdicts",
        "Analyse an experiment folder: report.md, report.html and figures in it; the ablation "
        "table on the terminal (docs/report.md).",
        _report_flags),
    "compare": Command(
        "compare two experiments variant by variant (B against A, by seed)",
        "Compare two experiments variant by variant (B - A, paired by seed): did any variant "
        "change by more than the margin? E.g. the same command before and after a code change.",
        _compare_flags),
    "list": Command(
        "list the built-in search spaces and their variants",
        "List the built-in search spaces, their variants and what each changes.",
        _no_arguments),
    "diagnose": Command(
        "show devices, memory, torch support, Ray's resources, a command to run",
        "Show this machine's devices, free/total memory and what this torch supports, Ray's "
        "resources (a local Ray, or the cluster at --address) and a suggested command line.",
        _diagnose_flags),
}


def parser_of(command: str) -> OneLineParser:
    """The parser of one subcommand, with its own ``--help``."""
    spec = COMMANDS[command]
    parser = OneLineParser(prog=f"{PROG} {command}", description=_wrapped(spec.description),
                           epilog=spec.epilog or None,
                           name=PROG if command == DEFAULT_COMMAND else None)
    spec.add_arguments(parser)
    return parser


def build_parser() -> OneLineParser:
    """The top-level parser: its ``--help`` lists the subcommands, one line each."""
    parser = OneLineParser(
        prog=PROG,
        description=_wrapped("Ablate training code on Ray Tune, every variant over the same "
                             "seeds, then decide which components matter: the built-in "
                             "multimodal regression model (runs without setup), a training "
                             "function, any script or a LightningModule."),
        epilog=f"{PROG} COMMAND --help shows a subcommand's flags. Without a subcommand,\n"
        f"the flags are run's: {PROG} --space components is\n"
        f"{PROG} run --space components.")
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND",
                                     parser_class=OneLineParser)
    for name, spec in COMMANDS.items():
        spec.add_arguments(commands.add_parser(name, help=spec.summary,
                                               description=_wrapped(spec.description),
                                               epilog=spec.epilog or None))
    return parser


def _wrapped(text: str) -> str:
    """A description as lines of a terminal's width (the help layout keeps lines as given)."""
    return textwrap.fill(text, width=79, break_on_hyphens=False)


def parse_command(argv: Sequence[str]) -> tuple[str, argparse.Namespace]:
    """The subcommand a command line names (``run`` where it names none) and its arguments;
    ``--help`` prints and a bad argument is one line, both exiting (SystemExit)."""
    argv = list(argv)
    if argv and argv[0] in HELP:
        build_parser().parse_args(argv[:1])
    if argv and argv[0] in COMMANDS:
        command, argv = argv[0], argv[1:]
    elif argv and not argv[0].startswith("-"):  # run takes no positional argument
        build_parser().error(f"unknown command {argv[0]!r}; choose one of "
                             f"{', '.join(COMMANDS)}")
    else:
        command = DEFAULT_COMMAND
    parser = parser_of(command)
    if command == "run":
        with_own_design_flags(parser, argv)
    return command, parser.parse_args(argv)


def with_own_design_flags(parser: OneLineParser, argv: Sequence[str]) -> None:
    """``run``'s ``parser`` with the flags of the design of one's own that ``argv``'s
    ``--design`` names, where its options declare some (the design imported, as planning
    would import it, so that ``--help`` lists them and the command line reads them back as
    its options: ``own_options`` in the namespace). A design that does not import, or flags
    that take run's own, are one line (exit code 2)."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--design", default="table")
    design = probe.parse_known_args(argv)[0].design
    if not names_own_design(design):
        return
    from ablations.experiment.designs.registry import design_named

    try:
        own: type[DesignOptions] | None = design_named(design).options
    except UsageError as exc:
        parser.error(error_text(exc))
    if own is None:
        return
    try:
        add_design_flags(parser.add_argument_group(own.title()), own)
    except argparse.ArgumentError as exc:
        parser.error(f"--design {design}: {exc}; give the design's flags names of their own")
    given_only(parser, {flag.dest for flag in own.flags})
    parser.set_defaults(own_options=own)
