"""The whole workflow of a fixed run and its continuation, on simulated experiments: the α it
spends in all (docs/verdicts.md, "From a fixed run to answers"; tests/test_workflow.py).

A default run (``--seeds 3``) prints verdicts, and its end offers ``--resume --seeds auto``,
which adds seeds in rounds up to 10 for the arms still ``inconclusive``. A user who runs both
has seen two tables on the same pilot seeds; an arm is wrongly called if either called it
wrongly. Two workflows:

- ``full_alpha``: the fixed table at full α (:func:`tools.simulation.fixed_verdicts`),
  then, if it left an arm ``inconclusive``, the sequential design planned at the continuation
  (``SeedDesign.plan(3, 10)``), which decides the pilot seeds again at its first look and
  spends α a second time.
- ``pilot``: the fixed run is the pilot look of that design, planned before its first trial
  (experiment.json's ``planned``, :mod:`ablations.results.stats.planned`): its table is
  :func:`ablations.results.stats.sequential.sequential_tests` with only the first look reached, and
  the continuation runs the same design, which never re-decides an arm (the runner's
  ``sequential_verdict_table``; :func:`tools.simulation.sequential_verdicts` here).

Each experiment has eight arms against the reference: :data:`SCENARIOS` says their true
ratios and which error is counted; the noise is Gaussian at the default spread or the tight
one (:data:`tools.simulation.SPREAD`, :data:`tools.simulation.TIGHT`).

``python -m tools.workflow_simulation [EXPERIMENTS]`` prints the table of docs/verdicts.md.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from ablations.results.stats.contrasts import robust_outliers
from ablations.results.stats.sequential import DEFAULT_MAX_SEEDS, SeedDesign, sequential_tests
from ablations.results.stats.shared_variance import DEFAULT_TEST, array_contrasts
from tools.simulation import (
    MARGIN,
    SPREAD,
    TIGHT,
    fixed_verdicts,
    sequential_verdicts,
    simulate_runs,
)

PILOT = 3  # the default run's seeds
LARGE = (1.5, 0.6, 1.4)  # three large effects: decided at the pilot, they open Holm's way
# name -> (true ratios of the eight arms, the arms whose error is counted, the error)
SCENARIOS = {
    "8 null arms": ((1.0,) * 8, tuple(range(8)), "worse/better"),
    "5 null arms + 3 large effects": ((1.0,) * 5 + LARGE, tuple(range(5)), "worse/better"),
    "an arm at +5% + 4 null + 3 large effects": ((1 + MARGIN,) + (1.0,) * 4 + LARGE, (0,),
                                                  "equivalent"),
}
# per-run s.d. (km): the synthetic default's, the tight one, and a noisier task's (paired s.d.
# 0.051 km, 9% of the reference's mean), where the continuation decides more arms
SPREADS = {"default": SPREAD, "tight": TIGHT, "3x default": 3 * SPREAD}


def pilot_look(reference: np.ndarray, arms: np.ndarray, design: SeedDesign, *,
               margin: float = MARGIN, alpha: float = 0.05,
               test: str = DEFAULT_TEST) -> dict[str, np.ndarray]:
    """The fixed run's table as the pilot look of ``design``: every arm over the first
    ``design.looks[0]`` seeds, the later looks not reached (NaN), as the runner's
    ``sequential_verdict_table`` computes it on a fixed run's trials."""
    n = design.looks[0]
    shape = (*arms.shape[:-1], len(design.looks))
    flags = np.zeros(shape, bool)
    flags[..., 0] = robust_outliers(arms[..., :n] - reference[:, None, :n])
    contrasts = array_contrasts(arms[..., :n], reference[:, :n], test=test,
                                floor_diff=design.levels(alpha, equivalence=False)[0],
                                floor_eq=design.levels(alpha, equivalence=True)[0],
                                eligible=~flags[..., 0])
    later = contrasts.map(lambda values: np.full(values.shape, np.nan))
    joined = type(contrasts).join([contrasts, *[later] * (len(design.looks) - 1)])
    return sequential_tests(joined, design=design, margin=margin, relative=True,
                            alpha=alpha, outlier=flags)


def _wrong(tests: dict[str, np.ndarray], counted: tuple[int, ...], error: str) -> np.ndarray:
    """Per experiment: whether any counted arm got the error."""
    key = "significant" if error == "worse/better" else "equivalent"
    return np.asarray(tests[key])[:, list(counted)].any(axis=-1)


def workflow_errors(scenario: str, *, spread: float = SPREAD, experiments: int = 4000,
                    seed: int = 0, alpha: float = 0.05, pilot: int = PILOT,
                    max_seeds: int = DEFAULT_MAX_SEEDS) -> dict[str, float]:
    """Error rates of one :data:`SCENARIOS` row over ``experiments`` simulated experiments
    (seeded): ``fixed`` (the fixed table alone, full α), ``full_alpha`` and ``pilot`` (the
    whole workflow, see the module's docstring), ``continued_full_alpha``/``continued_pilot``
    (the share of
    experiments whose first table left an arm ``inconclusive``: the continuation offered),
    and ``changed_full_alpha``/``changed_pilot`` (the share of those experiments where the
    continuation gave another verdict to an arm the first table had decided: a full-α first
    table is re-decided, a pilot look never is)."""
    ratios, counted, error = SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    reference, arms = simulate_runs(rng, experiments=experiments, seeds=max_seeds,
                                    ratios=ratios, spread=spread)
    design = SeedDesign.plan(pilot, max_seeds)
    first = (reference[:, :pilot], arms[..., :pilot])
    fixed = fixed_verdicts(*first, margin=MARGIN, relative=True, alpha=alpha)
    continued = sequential_verdicts(reference, arms, design, margin=MARGIN, relative=True,
                                    alpha=alpha)
    look = pilot_look(reference, arms, design, alpha=alpha)
    offered_full_alpha = (fixed["verdict"] == "inconclusive").any(axis=-1)
    offered_pilot = (look["verdict"] == "inconclusive").any(axis=-1)
    final = _wrong(continued, counted, error)
    decided = look["verdict"] != "inconclusive"
    changed = (decided & (continued["verdict"] != look["verdict"])).any(axis=-1)
    redecided = ((fixed["verdict"] != "inconclusive")
                 & (continued["verdict"] != fixed["verdict"])).any(axis=-1)
    return {
        "fixed": float(_wrong(fixed, counted, error).mean()),
        "full_alpha": float((_wrong(fixed, counted, error) | (offered_full_alpha & final)).mean()),
        "pilot": float((_wrong(look, counted, error) | (offered_pilot & final)).mean()),
        "continued_full_alpha": float(offered_full_alpha.mean()),
        "continued_pilot": float(offered_pilot.mean()),
        "changed_full_alpha": float((offered_full_alpha & redecided).mean()),
        "changed_pilot": float((offered_pilot & changed).mean()),
    }


def workflow_table(experiments: int = 4000, *, alpha: float = 0.05) -> pd.DataFrame:
    """Every :data:`SCENARIOS` row at each of :data:`SPREADS`, with the bound α + 3 MC s.e."""
    rows = []
    for s, (scenario, (_, _, error)) in enumerate(SCENARIOS.items()):
        for t, (spread_name, spread) in enumerate(SPREADS.items()):
            rates = workflow_errors(scenario, spread=spread, experiments=experiments,
                                    seed=100 * s + t, alpha=alpha)
            rows.append({"scenario": scenario, "error": f"false {error}",
                         "spread": spread_name, **rates})
    table = pd.DataFrame(rows)
    table.attrs["bound"] = alpha + 3 * np.sqrt(alpha * (1 - alpha) / experiments)
    return table


def main() -> None:
    """``python -m tools.workflow_simulation [EXPERIMENTS]``: the table of docs/verdicts.md."""
    experiments = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    table = workflow_table(experiments)
    print(f"Whole workflow (a {PILOT}-seed run, then --seeds auto up to {DEFAULT_MAX_SEEDS}), "
          f"{experiments} experiments per row; alpha + 3 MC s.e. = {table.attrs['bound']:.3f}\n")
    header = ["scenario", "error", "spread", "fixed", "full_alpha", "pilot", "continued_full_alpha",
              "continued_pilot", "changed_full_alpha", "changed_pilot"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in table[header].itertuples(index=False):
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                for v in row) + " |")


if __name__ == "__main__":
    main()
