"""The results side of each design: how an experiment's trials become its outcome.

An :class:`Analysis` is made from an experiment's experiment.json (``meta``) and answers what
the report, the summary, ``compare``, the notebook and the library ask of an experiment's
results, whatever its design: the settings fixed before the data
(:meth:`Analysis.recorded_settings`), the verdict table (:meth:`Analysis.verdicts`), the
design's own tables (:meth:`Analysis.table`: a factorial design's effects, a tuned
ablation's side-by-side verdicts), the lines that say how its verdicts were reached
(:meth:`Analysis.design_note`, :meth:`Analysis.summary_notes`) and its sentences of the
methods paragraph (:meth:`Analysis.methods_sentences`). Each design of
ablations/experiment/designs/ has one (its ``analysis``); the report's sections of a design
are :mod:`ablations.results.report.designs`'.

:func:`analysis_of` is the one place that reads which design an experiment.json records
(the ``report`` and ``compare`` commands and the notebook read a folder without the
experiment layer): the first registered analysis whose record it holds, else a table at
fixed seeds; an experiment over several datasets is :class:`AcrossDatasets`, one analysis per
dataset and the verdicts across them. :func:`register_analysis` adds a design's analysis.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import pandas as pd

from ablations.config.statuses import TrialStatus
from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
    NOT_GIVEN,
    Decision,
)
from ablations.results.io.directions import metric_of
from ablations.results.io.files import DESIGN_PLUGIN_KEY
from ablations.results.stats.dataset_rows import DATASET, by_dataset, dataset_names
from ablations.results.stats.datasets import MIN_RANK_DATASETS, across_datasets
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.planned import (
    PLANNED_KEY,
    SETTINGS,
    departures,
    pilot_design,
    pilot_note,
    verdict_test,
)
from ablations.results.stats.sequential import SeedDesign, design_note, seed_span
from ablations.results.stats.sequential_table import (
    compute_note,
    compute_spent,
    sequential_verdict_table,
)
from ablations.results.stats.verdicts import verdict_table

Cite = Callable[..., str]  # citation keys -> the text that cites them (methods.py's)


def settings_from(record: Optional[dict[str, Any]], meta: dict[str, Any]
                  ) -> Optional[dict[str, Any]]:
    """The four settings a record fixed before the data (``planned``, or a ``--seeds auto``
    run's design record); None for no record."""
    if not record:
        return None
    return {"reference": record.get("reference") or meta.get("reference") or DEFAULT_REFERENCE,
            **{key: record.get(key) for key in SETTINGS[1:]}}


class Analysis:
    """A table at fixed seeds (the grid's analysis, and the base of every other): verdicts at
    full α (:func:`~ablations.results.stats.verdicts.verdict_table`), or, for a table planned
    as the pilot look of a sequential design (experiment.json's ``planned`` with a
    ``design``), that look's verdicts (``attrs["pilot"]`` True)."""

    name = "table"  # the design's registered name (ablations/experiment/designs/records.py)
    record_key: Optional[str] = None  # experiment.json's key of the design's record
    has_verdicts = True  # its trials form an ablation table with verdicts
    table_names: tuple[str, ...] = ()  # the tables :meth:`table` gives besides the verdicts

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.planned: Optional[dict[str, Any]] = meta.get(PLANNED_KEY)
        # the sequential design this table is the pilot look of (None: none, or one look)
        self.pilot: Optional[SeedDesign] = pilot_design(self.planned)

    @classmethod
    def recorded_in(cls, meta: dict[str, Any]) -> bool:
        """Whether ``meta`` (an experiment.json) holds this design's record."""
        return bool(cls.record_key and meta.get(cls.record_key))

    @property
    def record(self) -> dict[str, Any]:
        """experiment.json's record of this design."""
        return self.meta[self.record_key] if self.record_key else {}

    @property
    def looks(self) -> bool:
        """Whether its verdicts are looks of a sequential design (each decided at its look's
        level; the report shows the look's p-values)."""
        return self.pilot is not None

    @property
    def decided_at(self) -> bool:
        """Whether its verdicts were decided at different looks (the summary's
        ``decided_at`` column)."""
        return False

    @property
    def max_failure_rate(self) -> Optional[float]:
        """The tolerance for divergence recorded before the data (``equivalent`` needs each
        arm's failure-rate bound below it); None: none."""
        return (self.planned or {}).get("max_failure_rate")

    @property
    def verdict_test(self) -> str:
        """The test its verdicts are decided with: the one recorded before the data
        (:func:`~ablations.results.stats.planned.verdict_test`)."""
        return verdict_test(self.planned)

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        """The reference, metric, margin and α recorded before the data; None for an
        experiment recorded before such records."""
        return settings_from(self.planned, self.meta)

    def decision(self, given: Decision = NOT_GIVEN) -> Decision:
        """The decision to decide with: each of ``given``'s settings, else the one recorded
        before the data, else the defaults (the space's reference, test_mae, 5%, 0.05); the
        tolerance for divergence is always the recorded one (:attr:`max_failure_rate`)."""
        planned = self.recorded_settings() or {}
        return Decision(
            reference=given.reference or planned.get("reference") or self.meta.get("reference")
            or DEFAULT_REFERENCE,
            metric=given.metric or planned.get("metric") or DEFAULT_METRIC,
            margin=given.margin if given.margin is not None else planned.get("margin")
            or DEFAULT_MARGIN,
            alpha=given.alpha if given.alpha is not None else float(planned.get("alpha")
                                                                     or DEFAULT_ALPHA),
            max_failure_rate=self.max_failure_rate)

    def with_metric(self, decision: Decision) -> Decision:
        """``decision`` with the metric as its :class:`~ablations.config.metrics.Metric`:
        the direction and unit the experiment's own code declared (``meta``'s ``metrics``),
        else the built-in model's."""
        return replace(decision, metric=metric_of(decision.metric, self.meta.get("metrics")))

    def verdicts(self, trials: pd.DataFrame, given: Decision = NOT_GIVEN) -> pd.DataFrame:
        """The verdict table of ``trials`` as the design decides it, at the settings
        ``given`` (those not given: recorded); a table decided on others is exploratory:
        ``attrs["exploratory"]`` lists what differs, ``attrs["settings"]`` the four it was
        decided on.

        Raises:
            ValueError: no verdicts are possible; the message says why.
        """
        decision = self.decision(given)
        table = self.decide(evaluation_rows(trials), self.with_metric(decision))
        table.attrs["exploratory"] = departures(self.recorded_settings() or {},
                                                **decision.terms())
        table.attrs["settings"] = decision.terms()
        return table

    def decide(self, trials: pd.DataFrame, decision: Decision) -> pd.DataFrame:
        """The verdict table of the evaluation rows ``trials`` at ``decision`` (its metric a
        Metric)."""
        if self.pilot is None:
            return verdict_table(trials, **decision.terms(),
                                 max_failure_rate=self.max_failure_rate, test=self.verdict_test)
        table = sequential_verdict_table(trials, self.pilot, self.planned["seeds"],
                                         **decision.terms(),
                                         max_failure_rate=self.max_failure_rate,
                                         test=self.verdict_test)
        table.attrs["pilot"] = True
        return table

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """The design's table ``name`` (one of :attr:`table_names`) of ``trials`` (every row
        of trials.parquet) at the settings ``given`` (those not given: recorded); None for a
        name the design has no table of.

        Raises:
            ValueError: the table is not possible (the message says why).
        """
        return None

    def across(self, trials: pd.DataFrame,
               per_dataset: Optional[dict[str, pd.DataFrame]] = None,
               given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """Each variant's verdict across the datasets; None for an experiment on one
        (:class:`AcrossDatasets` has them)."""
        return None

    def design_note(self, alpha: float) -> Optional[str]:
        """One line on how the design reached its verdicts (the summary and the report put
        it under the verdicts' note); None for a table at full α."""
        return pilot_note(self.pilot, alpha) if self.pilot is not None else None

    def summary_notes(self, trials: pd.DataFrame, alpha: float) -> list[str]:
        """The lines under the summary's notes (``trials``: the evaluation rows)."""
        note = self.design_note(alpha)
        return [note] if note else []

    def methods_sentences(self, cite: Cite) -> list[str]:
        """The methods paragraph's sentences on the design, after the comparison's
        (``cite``: citation keys -> the text citing them)."""
        design = (self.planned or {}).get("design")
        return [looks_sentence(design, cite, pilot=True)] if design else []

    def baseline_check(self, trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                       reference: str) -> Any:
        """Whether the reference learned (:func:`ablations.results.stats.baseline_check.
        baseline_check` on the evaluation rows ``trials``)."""
        from ablations.results.stats.baseline_check import baseline_check

        return baseline_check(trials, epochs, reference=reference)


def looks_sentence(design: dict[str, Any], cite: Cite, *, pilot: bool) -> str:
    """The methods' sentence on a sequential design (experiment.json's ``design``): the
    looks and how α was spent across them; ``pilot``: a fixed run that is its first look."""
    looks = design["looks"]
    shares = ", ".join(f"{s:.0%}" for s in design["diff_spend"])
    return (("The fixed seeds were the pilot look of a group-sequential design"
             if pilot else "Seeds were added in rounds where no verdict was reached yet")
            + f", with looks at {', '.join(map(str, looks))} seeds per variant; α was spent "
            f"across the looks{cite('lan1983')}: for worse or better {shares} of α at the "
            "successive looks, for equivalence the power family α·(n/N)² "
            f"{cite('kim1987').strip()}. A variant stopped at its first verdict"
            + ("; the verdicts here are the pilot look's, tested at its levels."
               if pilot else "."))


class FactorialAnalysis(Analysis):
    """A two-level factorial design (``--design factorial``): its cells' verdicts against the
    reference cell, and its main effects and interactions (table ``effects``)."""

    name = "factorial"
    record_key = "factorial"
    table_names = ("effects",)

    @property
    def design(self) -> Any:
        """The :class:`~ablations.results.stats.factorial_design.FactorialDesign`."""
        from ablations.results.stats.factorial_design import FactorialDesign

        return FactorialDesign.from_dict(self.record)

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        if name != "effects":
            return None
        from ablations.results.stats.factorial import factorial_effects  # statsmodels

        decision = self.with_metric(self.decision(given))
        return factorial_effects(trials, self.design, metric=decision.metric,
                                 margin=decision.margin, alpha=decision.alpha)

    def methods_sentences(self, cite: Cite) -> list[str]:
        design = self.design
        cells = len(design.runs)
        words = [
            f"The variants were the {cells} cells of a two-level design ({design.label}) in "
            f"{design.k} switches ({', '.join(design.factors)}), the reference cell among "
            "them. Each main effect and two-factor interaction was estimated from one "
            "ordinary least-squares fit of every cell at every seed, with the seeds as "
            "blocks, and given a t interval on the fit's residual degrees of freedom, a "
            "two-sided t-test and two one-sided tests against the same margin, with Holm's "
            f"correction over the family of effects{cite('holm1979')}; a main effect is the "
            "mean change when its switch is flipped from the reference cell's value, "
            "averaged over the other switches."]
        if design.fraction:
            words.append(f"In this fraction each effect is confounded with its aliases "
                         f"(defining relation {design.defining_relation()}); an estimate "
                         "is the sum over its alias chain.")
        return words + super().methods_sentences(cite)


class TunedAnalysis(Analysis):
    """Tuned ablations (``--tune-each``): the verdicts of the evaluation at the configuration
    given, and both evaluations side by side (table ``tuned``)."""

    name = "tuned"
    record_key = "tuned"
    table_names = ("tuned",)

    @property
    def keys(self) -> list[str]:
        """The tuned keys."""
        return self.record.get("keys", [])

    def table(self, name: str, trials: pd.DataFrame,
              given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        if name != "tuned":
            return None
        from ablations.results.stats.tuned import side_by_side

        return side_by_side(trials, keys=self.keys,
                            **self.with_metric(self.decision(given)).terms(),
                            max_failure_rate=self.max_failure_rate)

    def methods_sentences(self, cite: Cite) -> list[str]:
        record = self.record
        budget, startup = record.get("budget", "?"), record.get("startup_trials", "?")
        return [
            f"Every arm was also tuned with the same budget: {budget} trials of Optuna's TPE "
            f"sampler{cite('akiba2019')} through Ray Tune per arm, the first {startup} of "
            f"them at random, over {', '.join(self.keys) or 'no key'} in the same ranges and "
            f"with the same sampler seed for every arm, each trial trained for the same "
            f"epochs (no early stopping) and chosen on {record.get('metric', '?')}; each "
            "arm's best configuration was then evaluated over the same seeds and compared "
            "with the reference at its own best in the same way, each evaluation a family "
            "of its own for Holm's correction.", *super().methods_sentences(cite)]


class SearchAnalysis(Analysis):
    """A search space's trials: sampled configurations, no variants and no verdicts."""

    name = "search"
    record_key = "hpo"
    has_verdicts = False


class SequentialAnalysis(Analysis):
    """``--seeds auto``: the sequential design's verdicts, each at the look that decided it
    (experiment.json's ``sequential``: the design, its seed order and the rounds)."""

    name = "rounds"
    record_key = "sequential"

    def __init__(self, meta: dict[str, Any]) -> None:
        super().__init__(meta)
        self.pilot = None  # its looks are its own design's, not a planned table's
        self.seed_design = SeedDesign.from_dict(self.record["design"])

    @property
    def looks(self) -> bool:
        return True

    @property
    def decided_at(self) -> bool:
        return True

    @property
    def verdict_test(self) -> str:
        # the rounds' record's (a fixed run continued keeps its planned test there)
        return verdict_test(self.record if self.record.get("test") else self.planned)

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        # planned, or (an experiment recorded before it) the rounds' record
        return settings_from(self.planned or self.record, self.meta)

    def decide(self, trials: pd.DataFrame, decision: Decision) -> pd.DataFrame:
        return sequential_verdict_table(trials, self.seed_design, self.record["seeds"],
                                        **decision.terms(),
                                        max_failure_rate=self.max_failure_rate,
                                        test=self.verdict_test)

    @property
    def max_failure_rate(self) -> Optional[float]:
        """The tolerance the rounds decided with (their record's; a fixed run continued into
        rounds keeps the one it planned)."""
        return self.record.get("max_failure_rate", (self.planned or {}).get(
            "max_failure_rate"))

    def design_note(self, alpha: float) -> Optional[str]:
        return design_note(self.seed_design, alpha)

    def summary_notes(self, trials: pd.DataFrame, alpha: float) -> list[str]:
        notes = [design_note(self.seed_design, alpha),
                 compute_note(compute_spent(trials, self.seed_design.max_seeds), trials)]
        if self.record.get("continued"):  # a fixed run continued with --seeds auto
            notes.append(continuation_note(trials, self.record["continued"]))
        return notes

    def methods_sentences(self, cite: Cite) -> list[str]:
        return [looks_sentence(self.record["design"], cite, pilot=False)]


def continuation_note(trials: pd.DataFrame, continued: dict[str, Any]) -> str:
    """Under the summary of a continued experiment: where its verdicts come from and the
    compute the continuation added to the fixed run's."""
    ran = trials[trials["status"] != TrialStatus.SKIPPED]
    total_cpu, total_gpu = float(ran["cpu_hours"].sum()), float(ran["gpu_hours"].sum())
    added_trials = len(ran) - int(continued["trials"])
    gpu = total_gpu > 0
    added = (total_gpu - continued["gpu_hours"]) if gpu else (total_cpu - continued["cpu_hours"])
    unit = "GPU-hours" if gpu else "CPU-hours"
    seeds = continued["seeds"]
    source = ("the fixed run's table was its pilot look, planned before the first trial, and "
              "every verdict it gave stands" if continued.get("planned") else
              "none from the fixed table")
    return (f"Continued from a fixed run of {len(seeds)} seeds ({seed_span(seeds)}), its pilot: "
            f"every verdict above comes from the sequential design; {source}. The "
            f"continuation added {added_trials} trials, {added:.3g} {unit}; total "
            f"{len(ran)} trials, {(total_gpu if gpu else total_cpu):.3g} {unit}.")


class AcrossDatasets(Analysis):
    """An experiment over several datasets (docs/datasets.md): the design's analysis on each
    dataset's rows (``inner``), one verdict table below the other, and each variant's verdict
    across the datasets (:meth:`across`)."""

    name = "datasets"

    def __init__(self, inner: Analysis, datasets: tuple[str, ...] = ()) -> None:
        super().__init__(inner.meta)
        self.inner = inner
        self.pilot = inner.pilot
        self.datasets = tuple(datasets)  # their names, where the trials were seen

    def baseline_check(self, trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                       reference: str) -> Any:
        """A check of the reference on each dataset (a ``DatasetChecks``)."""
        from ablations.results.stats.baseline_check import dataset_baseline_checks

        return dataset_baseline_checks(trials, epochs, reference=reference)

    def methods_sentences(self, cite: Cite) -> list[str]:
        k = len(self.datasets)
        named = f"{k} datasets ({', '.join(self.datasets)})" if k else "the datasets"
        words = [
            f"These comparisons were made on each of the {named} separately. Across them, "
            "an ablation's effect on a dataset was the ratio of its mean to the reference's "
            "over the seeds both finished, and the mean of the datasets' log ratios was "
            "tested with t on k − 1 degrees of freedom from their spread (the dataset the "
            "unit, unweighted), with the same rules for a difference and for equivalence "
            "within the margin as a percentage, and Holm's correction over the ablations; "
            "an arm that diverged on more seeds than the reference on any dataset was "
            "called neither equivalent nor better across them."]
        if k >= MIN_RANK_DATASETS:
            words.append("Every arm was also ranked on each dataset by its median over seeds "
                         "(a diverged seed the worst), with Friedman's test and Nemenyi's "
                         f"critical difference{cite('demsar2006')}.")
        return [*self.inner.methods_sentences(cite), *words]

    @property
    def verdict_test(self) -> str:
        return self.inner.verdict_test

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        return self.inner.recorded_settings()

    def verdicts(self, trials: pd.DataFrame, given: Decision = NOT_GIVEN) -> pd.DataFrame:
        """Each dataset's verdicts, one below the other, with a ``dataset`` column first (a
        dataset with no verdicts possible is left out and named in
        ``attrs["dataset_errors"]``)."""
        return one_below_the_other(self.per_dataset(trials, given))

    def per_dataset(self, trials: pd.DataFrame,
                    given: Decision = NOT_GIVEN) -> dict[str, pd.DataFrame]:
        """The design's verdicts on each dataset's trials, by dataset. A dataset whose
        verdicts are not possible (no ok trial of its reference) maps to an empty table
        whose ``attrs["error"]`` says why."""
        out = {}
        for name, rows in by_dataset(trials).items():
            try:
                out[name] = self.inner.verdicts(rows, given)
            except ValueError as exc:
                empty = pd.DataFrame(columns=["ablation", "verdict", "unstable"])
                empty.attrs["error"] = str(exc)
                out[name] = empty
        return out

    def across(self, trials: pd.DataFrame,
               per_dataset: Optional[dict[str, pd.DataFrame]] = None,
               given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """Each variant's verdict across the datasets (:func:`ablations.results.stats.
        datasets.across_datasets`); ``per_dataset``: :meth:`per_dataset`'s, if computed.

        Raises:
            ValueError: a margin in the metric's units (the message says to give a
                percentage).
        """
        decision = self.decision(given)
        if per_dataset is None:
            per_dataset = self.per_dataset(trials, decision)
        usable = {name: table for name, table in per_dataset.items() if len(table)}
        return across_datasets(trials, usable, **self.with_metric(decision).terms())


def one_below_the_other(per_dataset: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-dataset verdict tables as one, with a ``dataset`` column first."""
    tables = {name: table for name, table in per_dataset.items() if len(table)}
    errors = {name: table.attrs["error"] for name, table in per_dataset.items()
              if not len(table)}
    if not tables:
        raise ValueError("no dataset has verdicts: " + "; ".join(
            f"{name}: {error}" for name, error in errors.items()))
    attrs = dict(next(iter(tables.values())).attrs)
    out = pd.concat([table.assign(**{DATASET: name}) for name, table in tables.items()],
                    ignore_index=True)
    out = out[[DATASET, *(c for c in out.columns if c != DATASET)]]
    for name, table in tables.items():  # attrs that differ by dataset: per dataset
        for key in ("reference_mean", "margin", "dropped_nan", "comparisons"):
            if key in table.attrs:
                attrs.setdefault(f"{key}_by_dataset", {})[name] = table.attrs[key]
    out.attrs.update(attrs, datasets=list(tables), dataset_errors=errors)
    return out


# The designs' analyses by name, each found by its record in experiment.json (a table at
# fixed seeds has none: the default).
ANALYSES: dict[str, type[Analysis]] = {
    cls.name: cls for cls in (TunedAnalysis, SequentialAnalysis, FactorialAnalysis,
                              SearchAnalysis)}


def register_analysis(analysis: type[Analysis]) -> None:
    """Add a design's analysis: experiment.json holding its ``record_key`` is read with it.

    Raises:
        ValueError: another analysis has its name or its record key.
    """
    for name, known in ANALYSES.items():
        if known is analysis:
            return
        if name == analysis.name or known.record_key == analysis.record_key:
            raise ValueError(f"analysis {analysis.name!r} (record {analysis.record_key!r}): "
                             f"{known.__name__} has that name or record already")
    if not analysis.record_key:
        raise ValueError(f"analysis {analysis.name!r} has no record_key: experiment.json "
                         "could not say it is this design's")
    ANALYSES[analysis.name] = analysis


def analysis_of(meta: dict[str, Any], trials: Optional[pd.DataFrame] = None) -> Analysis:
    """The analysis of the experiment whose experiment.json is ``meta``: the registered one
    whose record it holds (a plug-in design's module imported first: it registers its
    analysis), else a table at fixed seeds; with ``trials`` (its rows) covering several
    datasets, that analysis on each dataset (:class:`AcrossDatasets`).

    Raises:
        ValueError: a plug-in design's module does not import here (one line).
    """
    spec = meta.get(DESIGN_PLUGIN_KEY)
    if spec:
        import_design(str(spec))
    analysis = next((cls(meta) for cls in ANALYSES.values() if cls.recorded_in(meta)), None)
    analysis = analysis or Analysis(meta)
    if trials is not None and len(dataset_names(trials)) > 1:
        return AcrossDatasets(analysis, tuple(dataset_names(trials)))
    return analysis


def import_design(spec: str) -> None:
    """Import the module of the plug-in design ``spec`` (``package.module:Class``).

    Raises:
        ValueError: it does not import (one line: the module, why, where to put it).
    """
    import importlib

    module = spec.partition(":")[0]
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or the module's own code failing
        raise ValueError(f"the experiment ran the design {spec}, whose module {module} does "
                         f"not import here ({type(exc).__name__}: {exc}); run from the folder "
                         "that holds it, or put it on PYTHONPATH") from None


def recorded_settings(meta: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The settings the experiment ``meta`` decided on, as recorded before its data; None for
    an experiment recorded before such records."""
    return analysis_of(meta).recorded_settings()
