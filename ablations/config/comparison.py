"""What the verdicts compare by default: the metric, the reference variant, the margin and α.

One definition each for the library (``Experiment``), the command line's flags, the statistics
(results/stats/) and the report; experiment.json records the values a run used.
"""

from __future__ import annotations

DEFAULT_METRIC = "test_mae"  # test MAE after the last epoch (km), lower is better
DEFAULT_REFERENCE = "baseline"  # the full model: the variant every other one is compared with
DEFAULT_MARGIN = "5%"  # the smallest difference that matters: 5% of the reference's mean
DEFAULT_ALPHA = 0.05  # family-wise error rate of each kind of verdict
DEFAULT_MAX_SEEDS = 10  # the last look of --seeds auto's design (and of a fixed run's rounds)
