"""The analysis of a search space's trials (``--space hpo``): sampled configurations, with no
variants to give verdicts on."""

from __future__ import annotations

from ablations.results.stats.analysis_table import Analysis


class SearchAnalysis(Analysis):
    """A search space's trials: sampled configurations, no variants, no verdicts and no
    reference to check."""

    name = "search"
    record_key = "search"
    has_verdicts = False
