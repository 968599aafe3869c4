"""Ray Tune's OptunaSearch, made to survive a driver killed at the wrong moment.

Optuna writes a trial's end to its SQLite study at once; Tune saves its own state (the trials,
the searcher) every few seconds. A driver killed between the two leaves a trial that Tune
resumes as unfinished while the study has it finished, and Optuna refuses the resumed trial's
first report (``UpdateFinishedTrialError``), which ended the resumed search with a traceback.
Here that trial's reports and end are left out of the study, which keeps its first result; the
trial itself runs to its end as Tune resumes it, and its row in trials.parquet is the rerun's.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from optuna.exceptions import UpdateFinishedTrialError
from ray.tune.search.optuna import OptunaSearch

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
