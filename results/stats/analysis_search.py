"""The analysis of a search space's trials (``--design search``): sampled configurations, with
no variants to give verdicts on."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.results.stats.analysis_table import Analysis


class SearchAnalysis(Analysis):
    """A search space's trials: sampled configurations, no variants and no verdicts."""

    name = "search"
    record_key = "search"
    has_verdicts = False

    def baseline_check(self, trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                       reference: str) -> Any:
        """None: a search has no reference to check."""
        return None
