"""Ray Tune's side of the Optuna search: the searcher, made to survive a driver killed at the
wrong moment, and the callback that uploads a URI root's study. Both subclass Ray Tune's
classes, so this module loads Ray Tune and Optuna; ``designs/search.py`` imports it only when a
search is set up.

Optuna writes a trial's end to its SQLite study at once; Tune saves its own state (the trials,
the searcher) every few seconds. A driver killed between the two leaves a trial that Tune
resumes as unfinished while the study has it finished, and Optuna refuses the resumed trial's
first report (``UpdateFinishedTrialError``), which ended the resumed search with a traceback.
Here that trial's reports and end are left out of the study, which keeps its first result; the
trial itself runs to its end as Tune resumes it, and its row in trials.parquet is the rerun's.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from optuna.exceptions import UpdateFinishedTrialError
from ray.tune import Callback
from ray.tune.search.optuna import OptunaSearch

from ablations.experiment.core import events
from ablations.results.io.files import first_line

logger = logging.getLogger(__name__)


class ResumableOptunaSearch(OptunaSearch):
    """OptunaSearch that leaves out the reports of trials the study has finished already."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self._completed_trials and trial_id in self._ot_trials:
            return  # finished in the study before a resume (below): its later reports too
        try:
            super().on_trial_result(trial_id, result)
        except UpdateFinishedTrialError:
            logger.info("trial %s had ended in the Optuna study before the driver stopped; "
                        "the study keeps its first result", trial_id)
            self._completed_trials.add(trial_id)  # its later reports and end: skipped quietly

    def on_trial_complete(self, trial_id: str, result: Optional[dict[str, Any]] = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials:
            return  # finished in the study before a resume (above): nothing to tell
        super().on_trial_complete(trial_id, result, error)


class OptunaUpload(Callback):
    """Calls ``upload`` (the study's copy to the bucket) as each trial starts (Optuna has just
    recorded the trial it asked for) and ends (Tune tells the searcher first). A failed upload
    is a warning: the next event uploads again."""

    def __init__(self, upload: Callable[[], None]) -> None:
        self.upload = upload

    def _upload(self) -> None:
        try:
            self.upload()
        except OSError as exc:
            events.warning(f"the Optuna study was not uploaded ({first_line(exc)}); retried "
                           "at the next trial")

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._upload()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._upload()

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._upload()
