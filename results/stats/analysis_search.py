"""The analysis of a search space's trials (``--design search``): sampled configurations, with
no variants to give verdicts on."""

from __future__ import annotations

from ablations.results.stats.analysis_table import Analysis


class SearchAnalysis(Analysis):
    """A search space's trials: sampled configurations, no variants and no verdicts."""

    name = "search"
    record_key = "hpo"
    has_verdicts = False
