"""What the verdicts compare by default: the metric, the reference variant, the margin and α.

One definition each for the library (``Experiment``), the command line's flags, the statistics
(results/stats/) and the report; experiment.json records the values a run used.
:class:`Decision` carries them from the request to the verdicts, the summary and the report.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Optional

DEFAULT_METRIC = "test_mae"  # test MAE after the last epoch (km), lower is better
DEFAULT_REFERENCE = "baseline"  # the full model: the variant every other one is compared with
DEFAULT_MARGIN = "5%"  # the smallest difference that matters: 5% of the reference's mean
DEFAULT_ALPHA = 0.05  # family-wise error rate of each kind of verdict
DEFAULT_MAX_SEEDS = 10  # the last look of --seeds auto's design (and of a fixed run's rounds)


@dataclass(frozen=True)
class Decision:
    """How the verdicts are decided: the metric, the margin, α, the tolerance for divergence
    and the reference every variant is compared with. A field left None is not given: the
    default, or for an experiment already recorded the setting it fixed before its data
    (``Analysis.decision`` fills each in; a decision filled in passes through unchanged).

    The one object the library, the statistics and the report pass along; the statistics'
    functions that take the four as keywords (``verdict_table(trials, reference=...,
    metric=..., margin=..., alpha=...)``) get them from :meth:`terms`.
    """

    metric: Any = None  # a numeric column or own code's declared metric (or its Metric)
    margin: Optional[str | float] = None  # "5%" of the reference's mean, or metric units
    alpha: Optional[float] = None  # the family-wise error rate of each kind of verdict
    # `equivalent` only where each arm's failure-rate bound is below it, e.g. 0.1
    max_failure_rate: Optional[float] = None
    reference: Optional[str] = None  # None: the space's (``baseline`` by default)

    def over(self, other: "Decision") -> "Decision":
        """This decision's fields where given, else ``other``'s."""
        return replace(self, **{name: value for name, value in other.given().items()
                                if getattr(self, name) is None})

    def terms(self) -> dict[str, Any]:
        """The reference, metric, margin and α as the keywords of the statistics' functions."""
        return {"reference": self.reference, "metric": self.metric, "margin": self.margin,
                "alpha": self.alpha}

    def given(self) -> dict[str, Any]:
        """The fields given (not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


NOT_GIVEN = Decision()  # every setting left to the record or the defaults
DEFAULT_DECISION = Decision(metric=DEFAULT_METRIC, margin=DEFAULT_MARGIN, alpha=DEFAULT_ALPHA,
                            reference=DEFAULT_REFERENCE)  # what a setting left out is
