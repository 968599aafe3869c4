"""What a resume will do, in words: how many trials it keeps, continues and starts, from
Tune's saved state (:func:`~ablations.experiment.execution.tune_state.resume_counts`). The designs'
:meth:`~ablations.experiment.designs.base.Design.resume_line` say it."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ablations.config.values import arg
from ablations.experiment.core.options import TUNE_SUBDIR
from ablations.experiment.execution.tune_state import resume_counts


def counts_line(target: str, trials: Sequence[Any], num_samples: Optional[int],
                retry_failed: bool, tune_subdir: Optional[str] = None) -> str:
    """How many trials are finished, continue, start (Tune's saved state); ``num_samples``: a
    search's, None for fixed trials; ``tune_subdir``: the Tune folder to continue."""
    counts = resume_counts(target, trials, retry_failed=retry_failed, num_samples=num_samples,
                           tune_subdir=tune_subdir or TUNE_SUBDIR)
    one = {"continue": counts["continue"] == 1, "start": counts["start"] == 1}
    parts = [f"{counts['finished']} finished (kept)"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed (kept; {arg('retry_failed')} retries them)")
    parts.append(f"{counts['continue']} "
                 + ("continues from its" if one["continue"] else "continue from their")
                 + " last saved epoch")
    parts.append(f"{counts['start']} " + ("starts" if one["start"] else "start"))
    return ", ".join(parts)
