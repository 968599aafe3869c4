"""The baseline check: did the reference learn something before its ablations are judged?

An ablation of a model that learned nothing says nothing, so before the verdicts the runner's
summary (``ablations/cli/main.py``), ``report`` (report.md/html) and
:class:`ablations.experiment.api.Experiment` check the reference's ok trials:

- **skill** against the trivial predictor, the training targets' mean (each trial records its
  MAE, ``test_mae_mean_predictor``): ``1 − mean test MAE / mean test_mae_mean_predictor`` over
  the seeds. Below :data:`SKILL_FLOOR` the check fails: the reference removes less than a tenth
  of the error a constant leaves, so whatever the ablations change is measured against a model
  that has barely left the constant (the built-in baseline's skill on the synthetic data, the
  runner's defaults, is 0.54; docs/verdicts.md, "The baseline check").
- **convergence**: the median over the seeds of the share by which the validation MAE fell in
  the last epoch (epochs.parquet). Above :data:`STILL_FALLING_SHARE` (the default margin,
  5%) the check fails: one more epoch would move the reference by about the margin, so a
  verdict at that margin would depend on when training stopped.

The one line :meth:`BaselineCheck.line` is printed above the verdicts and kept in the
experiment folder as ``baseline_check.json`` (:func:`write_baseline_check`).

The same trivial predictor is the reference of the explosion rule
(``ablations/trial/divergence.py``): the training loop sets a trial ``diverged`` whose final
validation MAE exceeds ``EXPLOSION_FACTOR`` times the mean predictor's. Pure pandas, no torch
or Ray imports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import DEFAULT_REFERENCE
from ablations.config.statuses import TrialStatus
from ablations.results.io.files import join, write_json_atomic
from ablations.results.stats.dataset_rows import by_dataset, require_one_dataset
from ablations.results.stats.phases import evaluation_rows

SKILL_FLOOR = 0.1  # skill against the training mean below this: the reference learned little
STILL_FALLING_SHARE = 0.05  # last epoch's fall of the val MAE (median) above this: not converged
BASELINE_CHECK_FILE = "baseline_check.json"


@dataclass(frozen=True)
class BaselineCheck:
    """The check of one experiment's reference (NaN where its tables lack the numbers)."""

    reference: str
    seeds: int  # the reference's ok trials
    test_mae: float  # their mean test MAE
    test_mae_mean_predictor: float  # the training targets' mean as the prediction, same trials
    skill: float  # 1 - test_mae / test_mae_mean_predictor
    epochs: int  # the last epoch the trials ran (the convergence check needs two)
    last_epoch_fall: float  # median over seeds of (val MAE before − last) / before

    @property
    def learned(self) -> bool:
        """Skill at least :data:`SKILL_FLOOR` (True when it cannot be computed)."""
        return not self.skill < SKILL_FLOOR

    @property
    def converged(self) -> bool:
        """Validation MAE fell by at most :data:`STILL_FALLING_SHARE` in the last epoch
        (True with one epoch: nothing to compare)."""
        return not self.last_epoch_fall > STILL_FALLING_SHARE

    @property
    def passed(self) -> bool:
        return self.learned and self.converged

    def line(self) -> str:
        """One line for above the verdicts: the skill and the last epoch's fall, and, when
        the check fails, what that means for the verdicts."""
        value = f"{self.skill:.2f}".replace("-0.00", "0.00")
        skill = (f"test MAE {self.test_mae:.3g} km against the training mean's "
                 f"{self.test_mae_mean_predictor:.3g} km (skill {value})"
                 if not math.isnan(self.skill) else
                 f"test MAE {self.test_mae:.3g} km (no mean predictor recorded: no skill)")
        fall = (f"validation MAE {'fell' if self.last_epoch_fall >= 0 else 'rose'} "
                f"{abs(self.last_epoch_fall):.1%} in epoch {self.epochs}"
                if not math.isnan(self.last_epoch_fall) else "one epoch: no convergence check"
                if self.epochs == 1 else "no learning curve: no convergence check")
        seeds = f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        if self.passed:
            return f"Baseline check: {self.reference}'s {skill}; {fall} ({seeds}): passed."
        problems = []
        if not self.learned:
            problems.append(f"its test MAE {self.test_mae:.3g} km is not clearly better than "
                            f"predicting the training mean ({self.test_mae_mean_predictor:.3g} "
                            f"km; skill {value}, below {SKILL_FLOOR:g})")
        if not self.converged:
            problems.append(f"its {fall} (median, above {STILL_FALLING_SHARE:.0%}): still "
                            "learning when it stopped (more --epochs)")
        return (f"Baseline check failed for {self.reference} ({seeds}): "
                f"{'; '.join(problems)}: the verdicts below compare variants of a model that "
                f"{'learned little' if not self.learned else 'had not converged'}.")

    def to_dict(self) -> dict[str, Any]:
        """The record written to ``baseline_check.json`` (NaN as null)."""
        out = {k: (None if isinstance(v, float) and math.isnan(v) else v)
               for k, v in asdict(self).items()}
        out.update(passed=self.passed, learned=self.learned, converged=self.converged,
                   skill_floor=SKILL_FLOOR, still_falling_share=STILL_FALLING_SHARE,
                   line=self.line())
        return out


def baseline_check(trials: pd.DataFrame, epochs: Optional[pd.DataFrame] = None, *,
                   reference: str = DEFAULT_REFERENCE) -> Optional[BaselineCheck]:
    """Check ``reference``'s ok trials (see the module docstring).

    Args:
        trials: trials.parquet's rows (``ablation``, ``status``, ``test_mae`` and, where the
            run recorded it, ``test_mae_mean_predictor``).
        epochs: epochs.parquet's rows (``trial_name``, ``epoch``, ``val_mae``); None or empty:
            no convergence check.
        reference: the variant checked.

    Returns:
        The check, or None when the reference has no ok trial with a test MAE.
    """
    ok = trials[(trials["ablation"] == reference) & (trials["status"] == TrialStatus.OK)]
    ok = ok[ok["test_mae"].notna()] if "test_mae" in ok else ok.iloc[:0]
    if ok.empty:
        return None
    test_mae = float(ok["test_mae"].mean())
    trivial = float(ok["test_mae_mean_predictor"].mean()) \
        if "test_mae_mean_predictor" in ok else math.nan
    skill = 1.0 - test_mae / trivial if trivial > 0 else math.nan
    last_epoch, fall = 0, math.nan
    if epochs is not None and len(epochs) and {"trial_name", "epoch", "val_mae"} <= set(epochs):
        curves = epochs[epochs["trial_name"].isin(ok["trial_name"])]
        falls = []
        for _, curve in curves.groupby("trial_name"):
            values = curve.sort_values("epoch")["val_mae"].to_numpy(dtype=float)
            last_epoch = max(last_epoch, int(curve["epoch"].max()))
            if len(values) >= 2 and values[-2] > 0:
                falls.append((values[-2] - values[-1]) / values[-2])
        if falls:
            fall = float(pd.Series(falls).median())
    return BaselineCheck(reference=reference, seeds=len(ok), test_mae=test_mae,
                         test_mae_mean_predictor=trivial, skill=skill, epochs=last_epoch,
                         last_epoch_fall=fall)


def write_baseline_check(directory: str | Path, check: BaselineCheck | DatasetChecks) -> str:
    """Write ``check`` to ``<directory>/baseline_check.json``, atomically; return its path."""
    return write_json_atomic(check.to_dict(), join(directory, BASELINE_CHECK_FILE))


@dataclass(frozen=True)
class DatasetChecks:
    """The reference checked on each dataset of an experiment over several
    (docs/datasets.md): one :class:`BaselineCheck` per dataset with an ok reference."""

    checks: dict[str, BaselineCheck]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks.values())

    def line(self) -> str:
        """One line per dataset, named."""
        return "\n".join(f"[{name}] {check.line()}" for name, check in self.checks.items())

    def to_dict(self) -> dict[str, Any]:
        return {"datasets": {name: check.to_dict() for name, check in self.checks.items()},
                "passed": self.passed, "line": self.line()}


def dataset_baseline_checks(trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                            reference: str) -> Optional[DatasetChecks]:
    """:func:`baseline_check` on each dataset's trials (None where no dataset has one)."""
    checks = {}
    for name, rows in by_dataset(trials).items():
        check = baseline_check(rows, epochs, reference=reference)
        if check is not None:
            checks[name] = check
    return DatasetChecks(checks) if checks else None


def record_baseline_check(directory: Optional[str | Path], trials: pd.DataFrame,
                          epochs: Optional[pd.DataFrame], *, reference: str,
                          analysis: Any = None) -> Optional[BaselineCheck | DatasetChecks]:
    """The check of an experiment with verdicts (more than one variant, an ok reference, the
    rows of its evaluation phase), written to ``directory`` when given; else None.
    ``analysis``: the experiment's (results/stats/analyses.py), whose ``baseline_check``
    checks each dataset of an experiment over several (:class:`DatasetChecks`); without one,
    one check of the trials of one dataset (trials of several are refused: a ValueError)."""
    trials = evaluation_rows(trials)
    if trials.empty or trials["ablation"].nunique() < 2:
        return None
    if analysis is None:  # one check must not pool several datasets' references
        require_one_dataset(trials, "these trials are of several datasets: pass the "
                            "experiment's analysis (ablations.results.stats.analyses."
                            "analysis_of), which checks each")
    checking = baseline_check if analysis is None else analysis.baseline_check
    check = checking(trials, epochs, reference=reference)
    if check is not None and directory is not None:
        write_baseline_check(directory, check)
    return check
