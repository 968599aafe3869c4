"""How a trial ended: the values of trials.parquet's ``status`` column (results/io/schema.py).

The trial layer writes ``ok`` and ``diverged`` into a trial's last result; the experiment layer
adds the others when it collects the results (ablations/experiment/execution/tables.py). A member
is its string (``TrialStatus.OK == "ok"``, the same hash, ``f"{status}"`` gives ``ok``), so a column
read back from Parquet, which holds plain strings, compares with the members as it is.
"""

from __future__ import annotations

import enum


class TrialStatus(str, enum.Enum):
    """A trial's status, one per row of trials.parquet."""

    OK = "ok"  # trained every epoch and reported its test metrics: the only status compared
    FAILED = "failed"  # an exception, a lost node, an out-of-memory that recovery could not mend
    DIVERGED = "diverged"  # training failed it: a non-finite loss or an exploded validation error
    TIMEOUT = "timeout"  # it ran past its time limit (ablations/trial/time_limit.py)
    STOPPED = "stopped"  # stopped early by the search's scheduler (a tuning trial)
    INTERRUPTED = "interrupted"  # the run stopped (Ctrl-C, SIGTERM) after the trial's 1st epoch
    NOT_STARTED = "not_started"  # the run stopped before the trial recorded an epoch
    SKIPPED = "skipped"  # never run: its configuration cannot run here (the row says why)

    def __str__(self) -> str:  # the value on every Python (3.11 changed Enum's str and format)
        return self.value


# Trials a resume finishes: the run stopped before they ended.
UNFINISHED = (TrialStatus.INTERRUPTED, TrialStatus.NOT_STARTED)
