"""The training loop, the Ray Tune trainable, the runner and the CLI.

Only ``trainable``, ``runner``, ``hpo_run`` and ``progress`` import Ray; ``config`` and ``train``
are plain Python/PyTorch and usable without it.
"""

from ablations.config import ConfigError, TrialConfig, parse_bool
from ablations.train import TrialOutcome, train

__all__ = ["ConfigError", "TrialConfig", "TrialOutcome", "parse_bool", "train"]
