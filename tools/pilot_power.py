"""What the pilot look costs in power, simulated at the main job's own spreads on the runner's
decision functions: docs/verdicts.md's "The pilot's power" table.

The main job's trials (tests/fixtures/main_job/trials.parquet, or a trials.parquet given)
give each arm its measured ratio to the reference's mean and its paired spread (the standard
deviation over seeds of ``v_s − ratio · r_s``), and the reference its mean and spread. A
simulated experiment draws 10 seeds: ``r_s = m + s_r z_s`` and ``v_s = ratio · r_s + d e_s``
(z, e standard Gaussian). Its verdicts are what the runner computes: the fixed design at 3
seeds and full α (:func:`tools.simulation.fixed_verdicts`, ``--max-seeds 3``), and the
sequential design with looks at 3, 5, 7, 10 seeds (:func:`tools.simulation.
sequential_verdicts`): its pilot look (the default run's table), and where ``--seeds auto``
ends. The sequential rows are repeated with other shares of α for `worse`/`better` at the
pilot (the default is :data:`ablations.results.stats.sequential.PILOT_DIFF_SHARE`), the
trade the design makes: more at the pilot, less for the looks that follow. The verdicts'
test is the default, the shared-variance t (results/stats/shared_variance.py); the rows
``paired t: ...`` decide with each arm's own paired test, as experiments recorded before it do.

``python -m tools.pilot_power 2000`` prints the table (2000 experiments a row).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ablations.results.stats.seed_tables import seed_table
from ablations.results.stats.sequential import PILOT_DIFF_SHARE, SeedDesign
from ablations.results.stats.shared_variance import PAIRED_TEST
from tools.simulation import fixed_verdicts, sequential_verdicts

MAIN_JOB = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "main_job" / \
    "trials.parquet"
LARGE = 1.2  # an arm whose measured ratio is above this is one of the large effects
# an arm given a moderate effect in place of its measured null one (its paired spread kept):
# what later looks must still find when the pilot spends more of α
MODERATE = ("reduced_width", 1.08)
SHARES = (PILOT_DIFF_SHARE, 0.75, 0.9)  # worse/better's share of α at the pilot


def measured(trials: pd.DataFrame, reference: str = "baseline", metric: str = "test_mae"
             ) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """The reference's mean and spread over its seeds, and per arm (ratio, paired spread)."""
    ok = seed_table(trials[trials["status"] == "ok"], metric)
    r = ok[reference]
    arms = {}
    for arm in ok.columns.drop(reference):
        ratio = float(ok[arm].mean() / r.mean())
        arms[arm] = (ratio, float((ok[arm] - ratio * r).std(ddof=1)))
    return float(r.mean()), float(r.std(ddof=1)), arms


def design_with_pilot_share(share: float) -> SeedDesign:
    """The default looks (3, 5, 7, 10) and `equivalent`'s spending, with ``share`` of α for
    `worse`/`better` at the pilot and the rest in proportion to the seeds each look adds."""
    base = SeedDesign.plan(3, 10)
    added = np.diff([0, *base.looks]).astype(float)[1:]
    later = (1 - share) * added / added.sum()
    return SeedDesign(base.looks, (share, *(float(x) for x in later)), base.eq_spend)


def power_table(experiments: int, trials: pd.DataFrame | None = None,
                seed: int = 20261128) -> str:
    """The table: per design, how often each large effect and the moderate one are `worse`,
    and all the large ones."""
    trials = pd.read_parquet(MAIN_JOB) if trials is None else trials
    mean, spread, arms = measured(trials)
    if MODERATE[0] in arms:
        arms[MODERATE[0]] = (MODERATE[1], arms[MODERATE[0]][1])
    names = list(arms)
    large = [i for i, name in enumerate(names) if arms[name][0] > LARGE]
    shown = large + [names.index(MODERATE[0])] if MODERATE[0] in arms else large
    rng = np.random.default_rng(seed)
    reference = mean + spread * rng.standard_normal((experiments, 10))
    ratio = np.array([arms[name][0] for name in names])
    paired = np.array([arms[name][1] for name in names])
    values = ratio[None, :, None] * reference[:, None, :] + paired[None, :, None] * \
        rng.standard_normal((experiments, len(names), 10))
    rows = []
    fixed = fixed_verdicts(reference[:, :3], values[..., :3], margin=0.05, relative=True)
    rows.append(("fixed, 3 seeds, full α", fixed["verdict"] == "worse", None))
    # each arm's own paired test (an experiment recorded before the shared-variance test)
    own = fixed_verdicts(reference[:, :3], values[..., :3], margin=0.05, relative=True,
                         test=PAIRED_TEST)
    rows.append(("paired t: fixed, 3 seeds, full α", own["verdict"] == "worse", None))
    own_pilot = sequential_verdicts(reference, values, design_with_pilot_share(PILOT_DIFF_SHARE),
                                    margin=0.05, relative=True, test=PAIRED_TEST)
    rows.append(("paired t: the pilot look (share 50%)",
                 (own_pilot["verdict"] == "worse") & (own_pilot["decided"] == 0), None))
    for share in SHARES:
        tests = sequential_verdicts(reference, values, design_with_pilot_share(share),
                                    margin=0.05, relative=True)
        worse = tests["verdict"] == "worse"
        label = f"pilot share {share:.0%}" + (" (default)" if share == PILOT_DIFF_SHARE else "")
        rows.append((f"{label}: the pilot look", worse & (tests["decided"] == 0), None))
        # the arms' seeds and the reference's, which runs to the longest arm
        spent = tests["seeds"].sum(axis=-1) + tests["reference_seeds"]
        rows.append((f"{label}: --seeds auto to 10", worse, spent))
    header = ("| design | " + " | ".join(f"{names[i]} (×{ratio[i]:.2f}, paired s.d. "
                                         f"{paired[i]:.3f})" for i in shown)
              + " | all large ones | trials |")
    lines = [header, "|---|" + "---|" * (len(shown) + 2)]
    for label, worse, seeds in rows:
        cells = [f"{worse[:, i].mean():.2f}" for i in shown]
        cells.append(f"{worse[:, large].all(axis=-1).mean():.2f}")
        cells.append(f"{3 * (len(names) + 1)}" if seeds is None else f"{seeds.mean():.1f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(power_table(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
