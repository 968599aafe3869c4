"""What the command line prints: the spaces (``list``), the end-of-run summary with the
verdicts, the ``report`` and ``compare`` subcommands, and what reaches the console while Tune
runs (:func:`tune_lines`)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.config.statuses import TrialStatus
from ablations.trial.batches import scalar_columns
from ablations.config import TrialConfig
from ablations.cli.flags import EXIT_BAD_INPUT, PROG
from ablations.results.io.files import MetadataError, first_line, is_uri, read_metadata


def list_spaces() -> str:
    from ablations.search_spaces import SPACES

    lines = []
    for space in SPACES.values():
        lines.append(f"{space.name}: {space.description}")
        if space.search:
            for field, (kind, values) in space.search.items():
                lines.append(f"  {field:<24} {kind} {values}")
        variants = space.variants
        if space.variants_from_data is not None:
            variants = space.table(scalar_columns(TrialConfig()))
            lines.append("  (generated from the data's scalar columns; on the synthetic data:)")
        for variant, diff in variants.items():
            shown = ", ".join(f"{k}={v}" for k, v in diff.items()) or "(reference)"
            lines.append(f"  {variant:<24} {shown}")
    return "\n".join(lines)


def declared_columns(ok: Any, declared: dict[str, Any], metric: str) -> dict[str, str]:
    """Own code's metrics as the summary shows them: ``name (unit)``, mean ± std over the ok
    seeds for the verdicts' metric, the mean for the others."""
    columns = {}
    for name in dict.fromkeys([metric, *declared]):
        if name not in ok:
            continue
        values = ok[name].astype(float)
        unit = (declared.get(name) or {}).get("unit")
        label = f"{name} ({unit})" if unit else name
        if name == metric and len(values) > 1:
            columns[label] = f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"
        else:
            columns[label] = f"{values.mean():.4g}" if len(values) else "-"
    return columns


def builtin_columns(ablation: str, ok: Any, group: Any) -> dict[str, str]:
    """The built-in model's (and plugins') figures as the summary shows them."""
    mae = ok["test_mae"]
    return {
        "ablation": ablation,
        "ok": f"{len(ok)}/{len(group)}",
        "test_mae_km": f"{mae.mean():.3f} ± {mae.std(ddof=1):.3f}" if len(mae) > 1
        else (f"{mae.mean():.3f}" if len(mae) else "-"),
        "test_rmse_km": f"{ok['test_rmse'].mean():.3f}" if len(ok) else "-",
        "test_coverage_90": f"{ok['test_coverage_90'].mean():.2f}"
        if len(ok) and ok["test_coverage_90"].notna().any() else "-",
        "samples_per_s": f"{ok['train_samples_per_s'].mean():.0f}" if len(ok) else "-",
        "peak_mem_mb": f"{ok['peak_mem_mb'].mean():.0f}" if len(ok) else "-",
        "wall_s": f"{group['wall_s'].mean():.1f}",
        "cpu_h": f"{group['cpu_hours'].sum():.3f}",
    }


def summary_table(trials_df: Any, meta: Optional[dict[str, Any]] = None, *,
                  reference: Optional[str] = None, metric: Optional[str] = None,
                  margin: str | float | None = None, alpha: Optional[float] = None,
                  verdicts: Any = None) -> str:
    """Per variant: ok/total trials (the seeds spent), mean ± std of the test MAE over ok
    trials, ...; where the reference is a variant with an ok trial, also each variant's verdict
    against it and the equivalence bound it reached, and a note under the table with the
    margin and alpha. The verdicts are :func:`ablations.results.stats.decisions.verdicts_of`'s: as
    the experiment's design (``meta``: its experiment.json) decides them, at the settings recorded
    before the data unless others are given (then labelled exploratory); ``verdicts``: that
    table if the caller has it already."""
    import pandas as pd

    from ablations.results.stats.analysis import dropped_note, verdict_note
    from ablations.results.stats.decisions import decision_settings, verdicts_of
    from ablations.results.stats.phases import evaluation_rows
    from ablations.results.stats.planned import exploratory_note, pilot_design

    meta = meta or {}
    settings = decision_settings(meta, reference=reference, metric=metric, margin=margin,
                                 alpha=alpha)
    reference, metric, alpha = settings["reference"], settings["metric"], settings["alpha"]
    sequential = meta.get("sequential") or (
        meta["planned"] if pilot_design(meta.get("planned")) else None)
    trials_df = evaluation_rows(trials_df)  # a tuned ablation's: beside it, summary_lines
    known, verdicts, no_verdicts = verdicts, None, ""
    ok_reference = (trials_df["ablation"] == reference) & (trials_df["status"] == TrialStatus.OK)
    if ok_reference.any() and trials_df["ablation"].nunique() > 1:
        try:
            verdicts = (known if known is not None else
                        verdicts_of(trials_df, meta, **settings)).set_index("ablation")
        except (ValueError, KeyError) as exc:  # e.g. a relative margin of a mean of 0
            no_verdicts = f"\n\nNo verdicts: {exc}"
    elif (trials_df["ablation"] == reference).any() and trials_df["ablation"].nunique() > 1:
        statuses = trials_df.loc[trials_df["ablation"] == reference, "status"].value_counts()
        counted = ", ".join(f"{n} {status}" for status, n in statuses.items())
        no_verdicts = (f"\n\nNo verdicts: the reference {reference} has no ok trial "
                       f"({counted}); nothing to compare the variants with.")
    rows = []
    for ablation, group in trials_df.groupby("ablation", sort=False):
        ok = group[group["status"] == TrialStatus.OK]
        if meta.get("metrics"):  # own code: its declared metrics, the verdicts' first
            rows.append({"ablation": ablation, "ok": f"{len(ok)}/{len(group)}",
                         **declared_columns(ok, meta["metrics"], metric),
                         "wall_s": f"{group['wall_s'].mean():.1f}",
                         "cpu_h": f"{group['cpu_hours'].sum():.3f}"})
        else:
            rows.append(builtin_columns(ablation, ok, group))
        if verdicts is not None:
            bound = verdicts.loc[ablation, "equivalence_bound_holm"]
            rows[-1]["verdict"] = verdicts.loc[ablation, "verdict"]
            rows[-1]["equiv_bound"] = ("-" if pd.isna(bound) else f"{bound:.1%}"
                                       if verdicts.attrs.get("relative") else f"{bound:.3f}")
            if sequential and "rounds" in sequential and "decided_at" in verdicts:
                seeds_at = verdicts.loc[ablation, "decided_at"]
                rows[-1]["decided_at"] = "-" if pd.isna(seeds_at) else f"{int(seeds_at)} seeds"
    table = pd.DataFrame(rows).to_string(index=False)
    if verdicts is None:
        return table + no_verdicts
    seeds = verdicts["n_ok"]
    spent = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    exploratory = verdicts.attrs.get("exploratory")
    label = f"{exploratory_note(exploratory)}\n" if exploratory else ""
    text = (f"{table}\n\n{label}{verdict_note(verdicts)} Seeds per variant: {spent} (ok column); "
            "equiv_bound: equivalence_bound_holm" + (
                " (a share of the reference's mean)" if verdicts.attrs.get("relative") else "")
            + (". decided_at: the look that decided the verdict (frozen there)."
               if sequential and "rounds" in sequential else "."))
    dropped = dropped_note(verdicts.attrs.get("dropped_nan", []), metric)
    if dropped:
        text += f"\n{dropped}"
    reasons = verdicts["reason"] if "reason" in verdicts else pd.Series(dtype=object)
    for ablation, reason in reasons[reasons.fillna("") != ""].items():
        text += f"\n{ablation}: {verdicts.loc[ablation, 'verdict']}: {reason}"
    if sequential and "rounds" not in sequential:  # a fixed run, the pilot look of a design
        from ablations.results.stats.planned import pilot_note
        from ablations.results.stats.sequential import SeedDesign

        text += f"\n{pilot_note(SeedDesign.from_dict(sequential['design']), alpha)}"
    elif sequential:
        from ablations.results.stats.sequential import SeedDesign, design_note
        from ablations.results.stats.sequential_table import compute_note, compute_spent

        design = SeedDesign.from_dict(sequential["design"])
        text += (f"\n{design_note(design, alpha)}\n"
                 f"{compute_note(compute_spent(trials_df, design.max_seeds))}")
        if sequential.get("continued"):  # a fixed run continued with --seeds auto
            from ablations.experiment.continuing import continuation_note

            text += f"\n{continuation_note(trials_df, sequential['continued'])}"
    return text


def report_main(args: argparse.Namespace) -> int:
    """``run_ablations.py report EXPERIMENT_DIR``: write report.md/.html, print the table
    (its flags: ablations/cli/commands.py)."""
    import pyarrow as pa

    from ablations.results.report.build import write_report
    from ablations.results.report.page import markdown_cells
    from ablations.results.report.tables import verdict_view

    experiment = args.experiment if is_uri(args.experiment) \
        else str(Path(args.experiment).expanduser())
    try:
        report = write_report(experiment, reference=args.reference, metric=args.metric,
                              margin=args.margin, alpha=args.alpha,
                              compare_with=args.compare_with, formats=args.formats or ())
    except (ValueError, KeyError, OSError, pa.ArrowException) as exc:
        # ValueError includes ablations.results.report.build.NotAnExperimentError; OSError: cannot
        # write
        message = first_line(exc)
        if isinstance(exc, OSError) and getattr(exc, "filename", None):
            message = f"{exc.filename}: {exc.strerror or message}"
        print(f"{PROG} report: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ablation = report.ablation
    if ablation.attrs.get("exploratory"):  # settings other than those fixed before the data
        from ablations.results.stats.planned import exploratory_note

        print(exploratory_note(ablation.attrs["exploratory"]))
    print(markdown_cells(verdict_view(ablation, metric=ablation.attrs["metric"],
                                      alpha=ablation.attrs.get("alpha", DEFAULT_ALPHA),
                                      sequential="looks" in ablation)))
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

    folders = [x if is_uri(x) else str(Path(x).expanduser()) for x in (args.a, args.b)]
    recorded = [_recorded(folder) for folder in folders]
    given = {key: getattr(args, key) for key in ("reference", "metric", "margin", "alpha")
             if getattr(args, key) is not None}
    defaults = {"reference": DEFAULT_REFERENCE, "metric": DEFAULT_METRIC,
                "margin": DEFAULT_MARGIN, "alpha": DEFAULT_ALPHA}
    for key, value in defaults.items():  # A's settings, fixed before its data, else these
        if getattr(args, key) is None:
            setattr(args, key, (recorded[0] or {}).get(key) or value)
    args.alpha = float(args.alpha)
    try:
        table = compare_experiments(*folders, metric=args.metric, margin=args.margin,
                                    alpha=args.alpha, reference=args.reference)
    except (ValueError, KeyError, OSError, pa.ArrowException) as exc:
        message = first_line(exc)
        print(f"{PROG} compare: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    differ = _compare_departures(recorded, given)
    if differ:
        from ablations.results.stats.planned import exploratory_note

        print(exploratory_note(differ))
    print(markdown_cells(comparison_view(table, metric=args.metric, alpha=args.alpha)))
    print(f"\n{compare_note(table, a=Path(args.a).name or 'A', b=Path(args.b).name or 'B')}")
    return 0


def _recorded(folder: str) -> Optional[dict[str, Any]]:
    """The settings an experiment recorded before its data (results/stats/planned.py), if any."""
    from ablations.results.stats.planned import recorded_settings

    try:
        return recorded_settings(read_metadata(folder) or {})
    except (MetadataError, OSError):  # the comparison itself reads only the tables
        return None


def _compare_departures(recorded: Sequence[Optional[dict[str, Any]]],
                        given: dict[str, Any]) -> list[str]:
    """The settings ``compare`` was given on its command line that differ from those either
    experiment recorded before its data, each naming the experiment (a setting left out is
    A's, so no departure from A)."""
    from ablations.results.stats.planned import departures

    differ = []
    for label, planned in zip(("A", "B"), recorded):
        if not planned:
            continue
        settings = {key: given.get(key, planned.get(key)) for key in
                    ("reference", "metric", "margin", "alpha")}
        settings = {key: value for key, value in settings.items() if value is not None}
        differ += [f"{item} in {label}" for item in departures(
            planned, **{"reference": DEFAULT_REFERENCE, "metric": DEFAULT_METRIC,
                        "margin": DEFAULT_MARGIN, "alpha": DEFAULT_ALPHA, **settings})]
    return differ


TUNE_CONSOLE_FILE = "tune_console.log"


class TuneLines(io.TextIOBase):
    """The console while Tune runs: Tune's own start-up lines (its configuration box, "View
    detailed results here" with its folder, and a TensorBoard command for that folder) go to
    ``log``; every other line (a trial's error and its error file, anything else) reaches
    ``console``. The runner prints its own lines for the first three (the results folder,
    TensorBoard on the experiment, progress)."""

    OWN = ("View detailed results here:", "To visualize your results with TensorBoard")
    BOX = ("\u256d", "\u2502", "\u251c", "\u2570")  # the corners and sides of Tune's table

    def __init__(self, console: Any, log: Any) -> None:
        self.console, self.log, self.pending = console, log, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self._route(line + "\n")
        return len(text)

    def _route(self, line: str) -> None:
        stripped = line.strip()
        tunes = not stripped or stripped.startswith(self.BOX) or stripped.startswith(self.OWN)
        (self.log if tunes else self.console).write(line)

    def flush(self) -> None:
        if self.pending:
            self._route(self.pending)
            self.pending = ""
        self.console.flush()
        self.log.flush()


@contextlib.contextmanager
def tune_lines(root: str) -> Iterator[None]:
    """While it is open, Tune's own start-up lines go to ``<experiment>/tune_console.log`` (a
    local experiment; nowhere for a bucket) instead of the console (:class:`TuneLines`)."""
    target = os.devnull if is_uri(root) else str(Path(root) / TUNE_CONSOLE_FILE)
    with open(target, "a") as log:
        stream = TuneLines(sys.stdout, log)
        with contextlib.redirect_stdout(stream):
            try:
                yield
            finally:
                stream.flush()
