"""What the designs with several Tune runs share: the rounds of ``--seeds auto``
(rounds.py) and the stages of tuned ablations (tuned.py) run one part after another in
one experiment folder, each part its own Tune folder, the earlier parts' rows kept before its
own, experiment.json updated as a part ends, and the driver's time summed over the parts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from ablations.config.statuses import UNFINISHED
from ablations.experiment.execution.tune_setup import TuneSetup
from ablations.experiment.core.options import ExperimentResult, RunOptions
from ablations.experiment.execution.runner import run_experiment
from ablations.results.io.files import (
    METADATA_FILE,
    TRIALS_FILE,
    is_file,
    join,
    read_experiment,
    read_metadata,
    write_json_atomic,
)

if TYPE_CHECKING:
    from ablations.experiment.designs.base import Design
    from ablations.search_spaces import TrialSpec


class Parts:
    """The Tune runs of one experiment, one after another, in the folder ``root``; ``design``
    records the experiment (:meth:`Design.record`) at each."""

    def __init__(self, design: Design, options: RunOptions, root: str) -> None:
        self.design, self.options, self.root = design, options, root
        self.wall_s = 0.0  # the driver's time in Tune over the parts this call ran

    def run(self, trials: Sequence[TrialSpec], setup: TuneSetup,
            skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
            ) -> ExperimentResult:
        """Run one part; its result's ``wall_s`` is the time of every part so far."""
        return self.add(run_experiment(trials, self.options, skipped, design=self.design,
                                       setup=setup, resume=resume))

    def add(self, result: ExperimentResult) -> ExperimentResult:
        """Count ``result``'s driver time with the parts before it."""
        self.wall_s += result.wall_s
        result.wall_s = self.wall_s
        return result

    def earlier_rows(self, names: Collection[str]) -> Optional[tuple[pd.DataFrame, ...]]:
        """The (trials, epochs, predictions) rows of the earlier parts' trials ``names``, from
        the experiment's files; None when there are none."""
        if not names or not is_file(join(self.root, TRIALS_FILE)):
            return None
        frames = read_experiment(self.root)
        return tuple(frames[key][frames[key]["trial_name"].isin(set(names))]
                     for key in ("trials", "epochs", "predictions"))

    def tables(self) -> ExperimentResult:
        """The experiment's tables as its files hold them (no part left to run)."""
        frames = read_experiment(self.root)
        return ExperimentResult(self.root, frames["trials"], frames["epochs"],
                                frames["predictions"], wall_s=0.0)

    def write_record(self, fields: dict[str, Any], *, stamp: str, append: bool = False) -> None:
        """experiment.json with ``fields`` set and the time now under ``stamp`` (added to the
        list there with ``append``), between two parts."""
        meta = read_metadata(self.root) or {}
        meta.update(fields)
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        meta[stamp] = [*meta.get(stamp, []), now] if append else now
        write_json_atomic(meta, join(self.root, METADATA_FILE))


def stopped(trials: pd.DataFrame) -> bool:
    """Whether a stop (Ctrl-C, SIGTERM) left trials of ``trials`` unfinished: a resume
    continues the part."""
    return bool(trials["status"].isin(UNFINISHED).any())
