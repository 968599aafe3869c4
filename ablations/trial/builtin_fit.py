"""The built-in model, and every model plugin, as one user of the training-function contract:
:func:`builtin_fit` runs the runner's own loop (:func:`ablations.trial.loop.train`) with a
:class:`~ablations.trial.own_code.Trial`, as a user's ``fit`` would.

Each epoch but the last is a ``trial.report``; the resumable state is saved every
``checkpoint_every`` epochs and after the last; the last epoch's metrics, with the test
metrics and the trial's record (``ablations.trial.metrics.final_metrics``), are the trial's
final result, sent as one report with its predictions (``trial.last_report``), so that Tune
counts one report per epoch. The loop decides ``diverged`` itself (a non-finite loss, an
exploded validation MAE); its status travels in the result.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config import TrialConfig
from ablations.trial.loop import train
from ablations.trial.own_code import Trial
from ablations.trial.step import NO_HOOKS, LoopHooks


def builtin_fit(config: TrialConfig, trial: Trial, hooks: LoopHooks = NO_HOOKS) -> dict[str, Any]:
    """Train the built-in model or a plugin (``config.plugin``) as one trial; the final
    metrics. ``hooks``: the loop's (:class:`~ablations.trial.step.LoopHooks`); the runner
    passes none, a training function that runs this loop under test may."""
    final: dict[str, Any] = {}

    def report(metrics: dict[str, Any], state: dict[str, Any],
               predictions: Optional[pd.DataFrame]) -> None:
        if "epochs_run" in metrics:  # the loop finished the trial (the end, or it diverged)
            trial.last_report(**metrics)
            trial.save(state)
            if predictions is not None:
                trial.predictions(predictions)
            final.update(metrics)
            return
        trial.report(**metrics)
        if state["epoch"] % config.systems.checkpoint_every == 0:
            trial.save(state)

    train(config, report=report, resume_state=trial.restore(), hooks=hooks)
    return final
