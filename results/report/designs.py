"""How each design reads in the report: the report's side of a design's analysis
(:mod:`ablations.results.stats.analyses`), which :mod:`ablations.results.report.build` places
and never asks which design it has.

A :class:`DesignReport` adds to the report what its design has beside a table at fixed seeds:
a sentence under the verdicts (:meth:`DesignReport.verdicts_text`; a pilot look's, the
rounds'), its outcome's sections (:meth:`DesignReport.outcome_sections`: a tuned ablation's
verdicts side by side, a factorial design's effects with the interaction plot), what it spent
(:meth:`DesignReport.cost_sections`: the rounds' compute) and its tables for a paper
(:meth:`DesignReport.paper_tables`). An experiment over several datasets writes each
dataset's report and the one across them (:class:`DatasetsReport`). :func:`report_of` finds
an analysis's, the nearest registered for its class (:func:`register_report` adds one); a
design without its own reads as a table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from ablations.config.comparison import Decision
from ablations.results.report.formatting import plain
from ablations.results.report.page import Section
from ablations.results.report.paper import effects_paper_table, tuned_paper_table
from ablations.results.stats.analyses import (
    DatasetsAnalysis,
    Analysis,
    FactorialAnalysis,
    RoundsAnalysis,
    TunedAnalysis,
)
from ablations.results.stats.factorial import effects_view, factorial_note, interaction_means
from ablations.results.stats.phases import evaluation_rows, has_tuning
from ablations.results.stats.sequential_table import compute_note, compute_spent
from ablations.results.stats.verdicts import parse_margin

Render = Callable[[pd.DataFrame, str], str]  # a table and a format -> the file's text


class DesignReport:
    """A table at fixed seeds (the default): its verdicts and nothing beside them; a table
    planned as the pilot look of a sequential design says so under its verdicts."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis

    def refuse(self, directory: str | Path, margin: str | float,
               compare_with: str | Path | None) -> None:
        """Refuse a report this design cannot make (one line), before anything is drawn.

        Raises:
            ValueError: what cannot be reported, and what to give instead.
        """

    def write(self, directory: str | Path, trials: pd.DataFrame, epochs: pd.DataFrame,
              predictions: pd.DataFrame, scratch: Path, *, write_one: Callable[..., Any],
              write_file: Callable[[str, bytes], Any], report_type: type,
              **options: Any) -> Any:
        """Write the report with ``write_one`` (build's writer of one experiment's report),
        drawing in ``scratch``; ``options``: its settings, meta, comparison and formats."""
        return write_one(directory, trials, epochs, predictions, scratch, **options)

    def summary(self, trials: pd.DataFrame, decision: Decision
                ) -> tuple[str, Optional[pd.DataFrame], Optional[pd.DataFrame]]:
        """The end-of-run summary at ``decision``: (its text, the verdicts, the verdicts
        across datasets: None here). Verdicts where the analysis has them (an ablation
        table's; a search's trials have none); verdicts that are not possible are None, and
        the text says why."""
        from ablations.results.report.summary import summary_table

        verdicts = None
        if self.analysis.has_verdicts:
            try:  # once, for the summary, the trackers and the continuation hint
                verdicts = self.analysis.verdicts(trials, decision)
            except (ValueError, KeyError):  # no verdicts: the summary says why
                verdicts = None
        text = summary_table(trials, self.analysis.meta, verdicts=verdicts, decision=decision)
        return text, verdicts, None

    def verdicts_text(self) -> str:
        """Sentences after the Verdicts section's paragraph: how its verdicts were decided."""
        if self.analysis.pilot is None:
            return ""
        return (" These seeds are the pilot look of the design: each verdict is that "
                "look's, decided at its nominal level ('Decided at': its seeds per "
                "variant) and kept if the run is continued with --seeds auto.")

    def outcome_sections(self, trials: pd.DataFrame, figures_dir: Path,
                         decision: Decision) -> list[Section]:
        """The design's outcome beside the verdicts at ``decision``, after the differences to
        the reference (``trials``: every row of trials.parquet; figures drawn in
        ``figures_dir``)."""
        return []

    def cost_sections(self, trials: pd.DataFrame) -> list[Section]:
        """What the design spent, after the outcome (``trials``: the evaluation rows)."""
        return []

    def paper_tables(self, trials: pd.DataFrame, decision: Decision
                     ) -> dict[str, tuple[Optional[pd.DataFrame], Render]]:
        """The design's tables for a paper beside the ablation table, at ``decision``: a file
        stem -> (the table, or None; how a format renders it)."""
        return {}


class RoundsReport(DesignReport):
    """``--seeds auto``: each verdict frozen at its look, and the compute the rounds spent
    against a fixed design at the last look's seeds."""

    analysis: RoundsAnalysis

    def verdicts_text(self) -> str:
        return (" With --seeds auto each verdict was decided at a look and frozen there: "
                "the row's Δ, interval and p-values are that look's ('Decided at': its "
                "seeds per variant; p at that look, tested at the design's nominal level), "
                "the mean is over every seed the variant ran.")

    def cost_sections(self, trials: pd.DataFrame) -> list[Section]:
        compute = compute_spent(trials, self.analysis.seed_design.max_seeds)
        return [Section("Compute spent", f"{compute_note(compute, trials)} Per variant: the "
                        "trials it ran, in how many rounds, their CPU- and GPU-hours; fixed_*: "
                        "the same variant at the last look's seeds.", plain(compute))]


class FactorialReport(DesignReport):
    """A factorial design (``--design factorial``): its effects with their verdicts, and the
    interaction plot."""

    analysis: FactorialAnalysis

    def outcome_sections(self, trials: pd.DataFrame, figures_dir: Path,
                         decision: Decision) -> list[Section]:
        design, metric = self.analysis.design, decision.metric
        trials = evaluation_rows(trials)
        try:
            effects = self.analysis.table("effects", trials, decision)
        except ValueError as exc:
            return [Section("Factorial effects", f"No factorial effects: {exc}")]
        from ablations.results.report import plots  # matplotlib: only where a figure is drawn

        figure = plots.interaction_plot(interaction_means(trials, design, metric=metric),
                                        effects, figures_dir / "interactions.png",
                                        metric=metric)
        text = (f"{factorial_note(effects)} Factors: {design.legend()}."
                + (f" Generators {', '.join(design.generators)}; defining relation "
                   f"{design.defining_relation()}; an effect is estimated together with its "
                   "aliases (higher-order interactions assumed negligible)."
                   if design.generators else "")
                + " The table above compares each cell with the reference cell.")
        return [Section("Factorial effects", text, effects_view(effects)),
                Section("Interactions", "Mean of the metric at each pair of levels of two "
                        "factors, averaged over the other factors and the seeds; parallel lines "
                        "mean additive effects.", figure=figure, level=3)]

    def paper_tables(self, trials: pd.DataFrame, decision: Decision
                     ) -> dict[str, tuple[Optional[pd.DataFrame], Render]]:
        return {"factorial": (self.analysis.table("effects", trials, decision),
                              effects_paper_table)}


class TunedReport(DesignReport):
    """Tuned ablations (``--tune-each``): each arm's verdicts at the configuration given and
    at its own best, side by side."""

    analysis: TunedAnalysis

    def outcome_sections(self, trials: pd.DataFrame, figures_dir: Path,
                         decision: Decision) -> list[Section]:
        if not has_tuning(trials):
            return []
        keys = self.analysis.keys
        try:
            table = self.analysis.table("tuned", trials, decision)
        except ValueError as exc:
            return [Section("Tuned ablations", f"No tuned comparison: {exc}")]
        changed = table.loc[table["changed"], "ablation"].tolist()
        tuning = trials[trials["phase"] == "tuning"]
        text = (f"Every arm tuned over {', '.join(keys)} with the same budget "
                f"({tuning.groupby('ablation').size().max()} search trials per arm, "
                f"{tuning['cpu_hours'].sum():.3f} CPU-hours in all), on the validation metric at "
                "a tuning seed no evaluation used; then evaluated at its own best at the same "
                "seeds. Each evaluation is compared with the reference evaluated the same way, "
                "and is a family of its own. The other sections read the evaluation at the "
                "configuration given. Verdicts that change: "
                + (", ".join(changed) if changed else "none") + ".")
        view = pd.DataFrame({
            "Variant": table["ablation"],
            "At the given configuration": [f"{m:.3f} {v}" for m, v in
                                           zip(table["mean_given"], table["verdict_given"])],
            "At its own best": [f"{m:.3f} {v}" if pd.notna(m) else "-" for m, v in
                                zip(table["mean_tuned"], table["verdict_tuned"])],
            **{f"Best {key}": [f"{v:.3g}" if isinstance(v, float) else str(v)
                               for v in table[f"best_{key}"]] for key in keys},
            "Changed": ["yes" if c else "" for c in table["changed"]],
        })
        return [Section("Tuned ablations", text, view)]

    def paper_tables(self, trials: pd.DataFrame, decision: Decision
                     ) -> dict[str, tuple[Optional[pd.DataFrame], Render]]:
        return {"tuned": (self.analysis.table("tuned", trials, decision), tuned_paper_table)}


class DatasetsReport(DesignReport):
    """An experiment over several datasets: each dataset's report in ``datasets/<name>/``,
    then the one across them (:mod:`ablations.results.report.datasets_report`)."""

    def refuse(self, directory: str | Path, margin: str | float,
               compare_with: str | Path | None) -> None:
        if compare_with is not None:
            raise ValueError(f"{directory} ran on several datasets; compare_with compares two "
                             "experiments on one: compare each dataset's own experiments")
        if not parse_margin(margin)[1]:
            raise ValueError(f"margin {margin!r}: {directory} ran on several datasets, where "
                             "the effect is a ratio; give a percentage (e.g. 5%)")

    def summary(self, trials: pd.DataFrame, decision: Decision
                ) -> tuple[str, Optional[pd.DataFrame], Optional[pd.DataFrame]]:
        """Each dataset's summary, then the verdicts across them and the ranks."""
        from ablations.results.report.summary import datasets_summary

        return datasets_summary(trials, self.analysis.meta, decision)

    def write(self, directory: str | Path, trials: pd.DataFrame, epochs: pd.DataFrame,
              predictions: pd.DataFrame, scratch: Path, *, write_one: Callable[..., Any],
              write_file: Callable[[str, bytes], Any], report_type: type,
              **options: Any) -> Any:
        from ablations.results.report.datasets_report import write_datasets_report

        options.pop("comparison", None)  # refused above
        return write_datasets_report(
            directory, evaluation_rows(trials), evaluation_rows(epochs, trials),
            evaluation_rows(predictions, trials), scratch, write_one=write_one,
            write_file=write_file, report_type=report_type, **options)


# Each analysis class's report side; a class not here reads as its nearest base's.
REPORTS: dict[type[Analysis], type[DesignReport]] = {
    Analysis: DesignReport, RoundsAnalysis: RoundsReport,
    FactorialAnalysis: FactorialReport, TunedAnalysis: TunedReport,
    DatasetsAnalysis: DatasetsReport}


def register_report(analysis: type[Analysis], report: type[DesignReport]) -> None:
    """Make ``report`` the report side of ``analysis`` (and of its subclasses without their
    own)."""
    REPORTS[analysis] = report


def report_of(analysis: Analysis) -> DesignReport:
    """The report side of ``analysis``: registered for its class or the nearest base."""
    cls = next(cls for cls in type(analysis).__mro__ if cls in REPORTS)
    return REPORTS[cls](analysis)


def paper_tables(analysis: Analysis, trials: pd.DataFrame, decision: Decision,
                 formats: Sequence[str]) -> dict[str, tuple[pd.DataFrame, Render]]:
    """The design's paper tables that exist (none when no format is asked)."""
    if not formats:
        return {}
    tables = report_of(analysis).paper_tables(trials, decision)
    return {stem: (table, render) for stem, (table, render) in tables.items()
            if table is not None}
