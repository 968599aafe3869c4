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
fixed seeds; an experiment over several datasets is :class:`DatasetsAnalysis`, one analysis per
dataset and the verdicts across them. :func:`register_analysis` adds a design's analysis.

Each built-in design's analysis is a module of its own, imported here: a table at fixed seeds
and the base class (:mod:`~ablations.results.stats.analysis_table`), factorial
(:mod:`~ablations.results.stats.analysis_factorial`), tuned
(:mod:`~ablations.results.stats.analysis_tuned`), search
(:mod:`~ablations.results.stats.analysis_search`), the rounds of ``--seeds auto``
(:mod:`~ablations.results.stats.analysis_rounds`) and several datasets
(:mod:`~ablations.results.stats.analysis_datasets`).
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.results.io.files import DESIGN_PLUGIN_KEY
from ablations.results.stats.analysis_datasets import DatasetsAnalysis
from ablations.results.stats.analysis_datasets import one_below_the_other as one_below_the_other
from ablations.results.stats.analysis_factorial import FactorialAnalysis
from ablations.results.stats.analysis_search import SearchAnalysis
from ablations.results.stats.analysis_rounds import RoundsAnalysis
from ablations.results.stats.analysis_table import Analysis
from ablations.results.stats.analysis_tuned import TunedAnalysis
from ablations.results.stats.dataset_rows import dataset_names

# The designs' analyses by name, each found by its record in experiment.json (a table at
# fixed seeds has none: the default).
ANALYSES: dict[str, type[Analysis]] = {
    cls.name: cls for cls in (TunedAnalysis, RoundsAnalysis, FactorialAnalysis,
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
    datasets, that analysis on each dataset (:class:`DatasetsAnalysis`).

    Raises:
        ValueError: a plug-in design's module does not import here (one line).
    """
    spec = meta.get(DESIGN_PLUGIN_KEY)
    if spec:
        import_design(str(spec))
    analysis = next((cls(meta) for cls in ANALYSES.values() if cls.recorded_in(meta)), None)
    analysis = analysis or Analysis(meta)
    if trials is not None and len(dataset_names(trials)) > 1:
        return DatasetsAnalysis(analysis, tuple(dataset_names(trials)))
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
