"""What the command line prints: the spaces (``list``), the end-of-run summary with the
verdicts, the ``report`` and ``compare`` subcommands."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_DECISION, Decision
from ablations.cli.flags import EXIT_BAD_INPUT, PROG
from ablations.cli.console import error_text
from ablations.config.values import NamesArguments, expanded_path
from ablations.results.io.files import MetadataError, first_line, is_uri, read_metadata


def list_spaces() -> str:
    """``list``: each built-in space and its variants (a space generated from the data: on
    the embedded synthetic set's scalar columns). Loads no torch, pandas or data code."""
    from ablations.model.config import SYNTHETIC_SCALARS
    from ablations.search_spaces import SPACES

    lines = []
    for space in SPACES.values():
        lines.append(f"{space.name}: {space.description}")
        if space.search:
            for field, (kind, values) in space.search.items():
                lines.append(f"  {field:<24} {kind} {values}")
        variants = space.variants
        if space.variants_from_data is not None:
            variants = space.table([f"scalar_{i}" for i in range(SYNTHETIC_SCALARS)])
            lines.append("  (generated from the data's scalar columns; on the synthetic data:)")
        for variant, diff in variants.items():
            shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(reference)"
            lines.append(f"  {variant:<24} {shown}")
    return "\n".join(lines)


def input_problem(exc: BaseException) -> Optional[str]:
    """The one-line message of an error that ``report`` or ``compare`` met in its input (a
    ValueError the runner raised with words for the user, such as a damaged experiment.json
    or an unknown reference; a file that cannot be read or written; a damaged Parquet file);
    None for any other error, a fault of the runner's own (a ValueError raised inside numpy or
    pandas, say), which is not the user's input to fix."""
    import pyarrow as pa

    if isinstance(exc, OSError):
        filename = getattr(exc, "filename", None)
        return f"{filename}: {exc.strerror or first_line(exc)}" if filename else first_line(exc)
    if isinstance(exc, NamesArguments):  # its arguments and commands as the user types them
        return first_line(error_text(exc))
    if isinstance(exc, pa.ArrowException) or raised_by_the_runner(exc):
        return first_line(exc)
    return None


def raised_by_the_runner(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in the runner's own source (the innermost frame of its
    traceback is a file of the ``ablations`` package), not inside a library it called."""
    import ablations

    roots = [Path(path).resolve() for path in ablations.__path__]
    roots += [Path(path).resolve() for name in ("model", "results", "search_spaces")
              for path in (importlib.util.find_spec(f"ablations.{name}")
                           .submodule_search_locations or [])]
    frame, traceback = None, exc.__traceback__
    while traceback is not None:
        frame, traceback = traceback.tb_frame, traceback.tb_next
    if frame is None:
        return False
    path = Path(frame.f_code.co_filename).resolve()
    return any(path.is_relative_to(root) for root in roots)


def report_main(args: argparse.Namespace) -> int:
    """``run_ablations.py report EXPERIMENT_DIR``: write report.md/.html, print the table
    (its flags: ablations/cli/commands.py)."""
    import pyarrow as pa

    from ablations.results.report.build import write_report
    from ablations.results.report.page import markdown_cells
    from ablations.results.report.tables import verdict_view

    experiment = args.experiment if is_uri(args.experiment) \
        else str(expanded_path(args.experiment, "report"))
    try:
        report = write_report(experiment, reference=args.reference, metric=args.metric,
                              margin=args.margin, alpha=args.alpha,
                              compare_with=args.compare_with, formats=args.formats or (),
                              figures=args.figures)
    except (ValueError, OSError, pa.ArrowException) as exc:
        message = input_problem(exc)
        if message is None:
            raise  # a fault of the runner's: main() shows it as one, with its traceback
        print(f"{PROG} report: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ablation = report.ablation
    if ablation.attrs.get("exploratory"):  # settings other than those fixed before the data
        from ablations.results.stats.planned import exploratory_note

        print(exploratory_note(ablation.attrs["exploratory"]))
    print(markdown_cells(verdict_view(ablation, metric=ablation.attrs["metric"],
                                      alpha=ablation.attrs.get("alpha", DEFAULT_ALPHA),
                                      per_look="looks" in ablation)))
    if report.across is not None:  # several datasets: the verdicts across them
        from ablations.results.report.dataset_tables import across_view

        print(f"\nAcross the datasets:\n{markdown_cells(across_view(report.across))}")
    print(f"\n{report.note}")
    print(f"\nReport: {report.markdown} and {report.html}")
    for fmt, path in report.tables.items():
        print(f"Table ({fmt}): {path}")
    return 0


def compare_main(args: argparse.Namespace) -> int:
    """``run_ablations.py compare EXP_A EXP_B``: B against A, variant by variant (its flags:
    ablations/cli/commands.py)."""
    import pyarrow as pa

    from ablations.results.stats.compare import compare_experiments, compare_note
    from ablations.results.report.page import markdown_cells
    from ablations.results.report.tables import comparison_view

    folders = [x if is_uri(x) else str(expanded_path(x, "compare")) for x in (args.a, args.b)]
    try:
        recorded = [_recorded(folder) for folder in folders]
    except MetadataError as exc:  # its metric and units unknown: nothing to compare on
        print(f"{PROG} compare: error: {first_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    given = Decision(reference=args.reference, metric=args.metric, margin=args.margin,
                     alpha=args.alpha)
    # each setting not given: A's, fixed before its data, else the default
    decision = given.over(Decision(**(recorded[0] or {}))).over(DEFAULT_DECISION)
    metric, alpha = decision.metric, float(decision.alpha)
    try:
        table = compare_experiments(*folders, metric=metric, margin=decision.margin,
                                    alpha=alpha, reference=decision.reference)
    except (ValueError, OSError, pa.ArrowException) as exc:
        message = input_problem(exc)
        if message is None:
            raise  # a fault of the runner's: main() shows it as one, with its traceback
        print(f"{PROG} compare: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    differ = _compare_departures(recorded, given)
    if differ:
        from ablations.results.stats.planned import exploratory_note

        print(exploratory_note(differ))
    print(markdown_cells(comparison_view(table, metric=metric, alpha=alpha)))
    print(f"\n{compare_note(table, a=Path(args.a).name or 'A', b=Path(args.b).name or 'B')}")
    return 0


def _recorded(folder: str) -> Optional[dict[str, Any]]:
    """The settings an experiment recorded before its data (results/stats/planned.py), if any."""
    from ablations.results.stats.analyses import recorded_settings

    try:
        return recorded_settings(read_metadata(folder) or {})
    except OSError:  # unreadable: the comparison itself reads only the tables
        return None


def _compare_departures(recorded: Sequence[Optional[dict[str, Any]]],
                        given: Decision) -> list[str]:
    """The settings ``compare`` was given on its command line that differ from those either
    experiment recorded before its data, each naming the experiment (a setting left out is
    A's, so no departure from A)."""
    from ablations.results.stats.planned import departures

    differ = []
    for label, planned in zip(("A", "B"), recorded):
        if not planned:
            continue
        decision = given.over(Decision(**planned)).over(DEFAULT_DECISION)
        differ += [f"{item} in {label}" for item in departures(planned, **decision.terms())]
    return differ
