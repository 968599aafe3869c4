"""What Tune saved of an experiment, read back: what ``--resume`` will do with each trial
(:func:`resume_counts`, from Tune's state and the trials' own) and the results of the trials
that ended when ``Tuner.fit`` raised after them (:func:`results_despite`)."""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.experiment.execution.interrupt import quiet_tune_logs
from ablations.experiment.core.options import TUNE_SUBDIR
from ablations.experiment.execution.reported import unpacked
from ablations.experiment.execution.tables import (
    result_name,
    saved_results,
    trial_status,
    tune_state_file,
)
from ablations.experiment.provenance.trial_store import REUSABLE, read_table, recorded_reused
from ablations.results.io.files import TRIALS_FILE, first_line, is_file, join
from ablations.search_spaces.spaces import TrialSpec


def results_despite(error: Exception, tune_dir: str, state_before: Optional[tuple[str, Any]]
                    ) -> Optional[Any]:
    """When ``Tuner.fit`` raised after trials ended: their results, read from the state Tune
    saved during this run (``saved_results``), so that the tables of the trials that ended are
    written whatever Tune's last step did. None (the caller re-raises) if Tune saved no state
    during this run, no trial in it ended, or it cannot be read.

    The case seen: a Ray job's driver whose working directory was deleted under it (the job's
    working_dir, unpacked again by a second node's runtime-env agent that shares the head's
    temp dir); ``Tuner.fit`` ends with ``ExperimentAnalysis``, which needs ``os.getcwd()``
    (``saved_results``) and raised FileNotFoundError after every trial had ended ok."""
    try:
        state = tune_state_file(tune_dir)
        if state is None or state == state_before:
            return None
        with quiet_tune_logs():
            grid = saved_results(tune_dir, state)
        ended = any(trial_status(unpacked(result.metrics), result.error, None)[0]
                    not in UNFINISHED for result in grid)
    except Exception as unreadable:  # noqa: BLE001 - the caller re-raises ``error``
        logging.getLogger(__name__).warning(
            "Ray Tune raised %s: %s; the state it saved in %s could not be read either: %s",
            type(error).__name__, first_line(error), tune_dir, first_line(unreadable))
        return None
    if not ended:
        return None
    logging.getLogger(__name__).warning(
        "Ray Tune raised %s: %s after the trials ran; their results were read from the state "
        "it saved (%s)", type(error).__name__, first_line(error), state[0])
    return grid


def resume_counts(root: str, trials: Sequence[TrialSpec], *, retry_failed: bool = False,
                  num_samples: Optional[int] = None, tune_subdir: str = TUNE_SUBDIR
                  ) -> dict[str, int]:
    """What ``--resume`` will do with each trial of the experiment at ``root``, from Tune's
    saved state and the trials' own: ``finished`` (kept: ok, diverged, stopped), ``failed``
    (kept; with ``retry_failed`` counted in ``continue``), ``continue`` (resumes from its
    saved state) and ``start`` (from scratch). ``trials`` is the plan (empty for a search of
    ``num_samples`` trials)."""
    from ray.tune import Tuner

    from ablations.experiment.execution.trainable import STATE_FILE, STATE_SUBDIR

    def saved(name: str) -> bool:  # the trainable resumes from this even if Tune never saw it
        return is_file(join(root, STATE_SUBDIR, name, STATE_FILE))

    tune_dir = join(root, tune_subdir)
    results = []
    if Tuner.can_restore(tune_dir):
        with quiet_tune_logs():  # by the state file's path: no working directory needed
            results = list(saved_results(tune_dir) or [])
    counts = {"finished": 0, "failed": 0, "continue": 0, "start": 0}
    for result in results:
        status, _, _ = trial_status(unpacked(result.metrics), result.error, None,
                                    may_stop_early=num_samples is not None)
        if status in (TrialStatus.FAILED, TrialStatus.TIMEOUT):
            counts["continue" if retry_failed else "failed"] += 1
        elif status == TrialStatus.INTERRUPTED or (status == TrialStatus.NOT_STARTED
                                                   and saved(result_name(result))):
            counts["continue"] += 1
        elif status == TrialStatus.NOT_STARTED:
            counts["start"] += 1
        else:
            counts["finished"] += 1
    known = {result_name(result) for result in results}
    # its rows outside Tune's run: taken from other experiments, or kept when the table grew
    table = read_table(join(root, TRIALS_FILE))
    ended = set(recorded_reused(root, tune_subdir)) | (set() if table is None else set(
        table.loc[table["status"].isin(REUSABLE), "trial_name"]))
    for spec in trials:  # not created in Tune before the stop
        if spec.name not in known:
            counts["finished" if spec.name in ended
                   else "continue" if saved(spec.name) else "start"] += 1
    if num_samples is not None:
        counts["start"] += max(0, num_samples - len(results))
    return counts
