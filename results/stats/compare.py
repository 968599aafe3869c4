"""Two experiments compared variant by variant: did anything change between them (a code
change, another dataset, another machine) by more than the margin?

:func:`compare_experiments` pairs each variant's trials of experiment B with the same variant's
trials of experiment A by seed (Welch's test where fewer than two seeds are shared), one family
of all the variants both have, and gives each the verdicts of
:mod:`ablations.results.stats.verdicts`: `worse`/`better` (B differs from A, Holm over the family),
`equivalent` (TOST: the 1 − 2α interval of B − A inside ±margin), `negligible` (both),
`inconclusive` (neither). A percentage margin is tested as a ratio: the 1 − 2α Fieller interval of
the variant's mean in B over its mean in A inside 1 ± margin
(:mod:`ablations.results.stats.contrasts`). :func:`compare_note` says it in words;
``run_ablations.py compare EXP_A EXP_B`` prints both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.stats.comparisons import compare_arms, dropped_note, usable_trials
from ablations.results.stats.contrasts import Contrasts, robust_outliers
from ablations.results.stats.crossed import CROSSED_NOTE, add_crossed_columns, crossed_family
from ablations.results.stats.failures import (
    FailureTests,
    failure_reason,
    outcome_tables,
    paired_failure_test,
    verdict_reasons,
)
from ablations.results.io.directions import Metric, MetricLike, metric_of
from ablations.results.io.files import MetadataError, read_experiment, read_metadata
from ablations.results.stats.dataset_rows import require_one_dataset
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.verdicts import (
    equivalence_tests,
    parse_margin,
    resolve_margin,
    seed_contrast,
)


def _trials(experiment: str | Path | pd.DataFrame) -> pd.DataFrame:
    if isinstance(experiment, pd.DataFrame):
        return experiment
    return read_experiment(experiment)["trials"]


def declared_in(*experiments: str | Path | pd.DataFrame) -> Optional[dict[str, Any]]:
    """The metrics own code declared (experiment.json's ``metrics``) in the first of the
    experiment folders that records them; None for tables, and for folders of the built-in
    model or a plugin (or with a damaged experiment.json: no declaration to read)."""
    for experiment in experiments:
        if isinstance(experiment, pd.DataFrame):
            continue
        with contextlib.suppress(MetadataError):
            declared = (read_metadata(experiment) or {}).get("metrics")
            if declared:
                return declared
    return None


def compare_experiments(a: str | Path | pd.DataFrame, b: str | Path | pd.DataFrame, *,
                        metric: MetricLike = DEFAULT_METRIC,
                        margin: str | float = DEFAULT_MARGIN,
                        alpha: float = DEFAULT_ALPHA, reference: str = DEFAULT_REFERENCE,
                        ) -> pd.DataFrame:
    """Experiment B against experiment A, per variant both ran.

    Args:
        a, b: experiment folders (paths or URIs) or their trials tables.
        metric: a numeric column of both trials tables: its
            :class:`~ablations.config.metrics.Metric`, or its name, whose direction is the one
            the folders' own code declared (experiment.json's ``metrics``, A's first), else
            the built-in model's (:func:`ablations.results.io.directions.metric_of`).
        margin: the smallest change that matters: in the metric's units (``"0.02"``), or a
            percentage (``"5%"``): of each variant's own mean in A, tested as a ratio (a
            variant whose mean in A is not above 0 gets no equivalence test).
        alpha: family-wise error rate of each kind of verdict, in (0, 0.5).
        reference: for a percentage, A's mean of this variant (of all its ok trials where A
            has no such variant) must be above 0, or the margin is refused.

    Returns:
        One row per variant in both (A's order): ``ablation``, ``n_a``/``n_b`` (ok trials
        with a finite metric), ``a_mean``/``b_mean``, ``test`` (paired t over the shared seeds,
        or Welch t), ``n_pairs``, ``diff_mean`` (B − A) with ``diff_ci_low``/``diff_ci_high``
        (1 − α), ``se``, ``df``, ``p_value``/``p_holm``, ``tost_ci_low``/``tost_ci_high``
        (1 − 2α), ``ratio_ci_low``/``ratio_ci_high`` (Fieller's 1 − 2α interval of B/A − 1),
        ``p_tost_holm``, ``equivalence_bound_holm``, ``outlier``, ``unstable``, ``margin``,
        ``verdict``, ``reason`` and ``identical`` (every shared seed gave the same value bit
        for bit: the same machine and software stack); results/README.md lists them.
        ``.attrs``: metric, margin (in the metric's units, and as given), α, direction, and
        ``only_in_a`` / ``only_in_b`` (variants left out), ``no_ok`` (variants in both without
        an ok trial in both), ``dropped_nan_a`` / ``dropped_nan_b`` (ok trials left out for a
        NaN or infinite metric, :func:`ablations.results.stats.comparisons.usable_trials`).

    Raises:
        ValueError: no variant in common, a metric missing from a table, a bad margin or α.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    measure = metric if isinstance(metric, Metric) else metric_of(metric, declared_in(a, b))
    metric = measure.name
    first, second = _evaluations(a, b, metric)
    ok_a, dropped_a = usable_trials(first, metric)
    ok_b, dropped_b = usable_trials(second, metric)
    order_a = list(dict.fromkeys(first["ablation"]))
    in_b = set(second["ablation"])
    shared = [v for v in order_a if v in in_b]
    if not shared:
        raise ValueError("the two experiments have no variant in common: nothing to compare")
    # a diverged trial is an outcome (results/stats/failures.py): a variant that diverged in B
    # where it finished in A is compared, never left out
    outcomes = (*outcome_tables(first, metric), *outcome_tables(second, metric))
    with_ok = _with_outcomes(*outcomes)
    common = [v for v in shared if v in with_ok]
    if not common:
        raise ValueError("no variant has an ok trial in both experiments: nothing to compare")
    direction = measure.sign
    value, relative = _margin_of(margin, ok_a, metric=metric, reference=reference)
    compared = _compare_variants(common, ok_a, ok_b, first, metric=metric, alpha=alpha,
                                 outcomes=outcomes, direction=direction)
    table = _verdict_table(compared, margin=value, relative=relative, alpha=alpha,
                           direction=direction)
    table.attrs.update(metric=metric, margin=value, relative=relative, margin_given=str(margin),
                       alpha=alpha, direction=direction, unit=measure.unit, reference=reference,
                       no_ok=[v for v in shared if v not in with_ok],
                       dropped_nan_a=dropped_a, dropped_nan_b=dropped_b,
                       only_in_a=[v for v in order_a if v not in in_b],
                       only_in_b=[v for v in dict.fromkeys(second["ablation"])
                                  if v not in set(order_a)])
    return table


# the columns of compare_experiments' table, in order (results/README.md lists them)
COLUMN_ORDER = ["ablation", "n_a", "n_b", "a_mean", "b_mean", "test", "n_pairs", "diff_mean",
                "diff_ci_low", "diff_ci_high", "se", "df", "p_value", "p_holm", "tost_ci_low",
                "tost_ci_high", "ratio_ci_low", "ratio_ci_high", "p_tost_holm",
                "equivalence_bound_holm", "outlier", "unstable", "margin", "verdict",
                "reason", "identical"]


def _evaluations(a: str | Path | pd.DataFrame, b: str | Path | pd.DataFrame, metric: str
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The evaluation rows of A's and of B's trials (a tuned ablation's evaluation at the
    configuration given: results/stats/phases.py).

    Raises:
        ValueError: a table without ``metric``, or one on several datasets.
    """
    first, second = evaluation_rows(_trials(a)), evaluation_rows(_trials(b))
    for name, table in (("A", first), ("B", second)):
        if metric not in table:
            raise ValueError(f"experiment {name} has no column {metric!r}")
        # variant by variant would mix its datasets
        require_one_dataset(table, f"experiment {name} ran on several datasets; compare takes "
                            "experiments on one (each dataset's verdicts are in its report)")
    return first, second


def _margin_of(margin: str | float, ok_a: pd.DataFrame, *, metric: str, reference: str
               ) -> tuple[float, bool]:
    """The margin in the metric's units, and whether it is a percentage (of A's mean of
    ``reference``, or of all A's usable trials where A has no such variant).

    Raises:
        ValueError: a bad margin, or a percentage of a mean not above 0.
    """
    parse_margin(margin)
    base = ok_a.loc[ok_a["ablation"] == reference, metric]
    return resolve_margin(margin, float((base if len(base) else ok_a[metric]).mean()))


def _with_outcomes(finished_a: pd.DataFrame, failed_a: pd.DataFrame,
                   finished_b: pd.DataFrame, failed_b: pd.DataFrame) -> set[str]:
    """The variants with an outcome (finished or diverged) in both experiments that finished
    at least once in one of them: a variant that diverged everywhere in both has nothing to
    compare."""
    finished = ({v for v in finished_a if finished_a[v].notna().any()}
                | {v for v in finished_b if finished_b[v].notna().any()})
    return ({v for v in finished_a if (finished_a[v].notna() | failed_a[v]).any()}
            & {v for v in finished_b if (finished_b[v].notna() | failed_b[v]).any()}
            & finished)


@dataclass
class _Compared:
    """The variants compared, one entry each in ``rows``' order: its row of the table, its
    contrast of B against A, whether its seeds' differences hold an outlier and its training
    failures (:func:`_instability`); ``crossed``: the entries of a crossed grid."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    items: list[Contrasts] = field(default_factory=list)
    flagged: list[bool] = field(default_factory=list)
    instability: list[tuple] = field(default_factory=list)
    crossed: list[int] = field(default_factory=list)


def _compare_variants(common: list[str], ok_a: pd.DataFrame, ok_b: pd.DataFrame,
                      first: pd.DataFrame, *, metric: str, alpha: float,
                      outcomes: tuple[pd.DataFrame, ...], direction: int) -> _Compared:
    """Each variant of ``common`` in B against A, paired by seed (``first``: A's evaluation
    rows; ``outcomes``: :func:`~ablations.results.stats.failures.outcome_tables`' of A, then
    of B)."""
    compared = _Compared()
    for variant in common:
        va = ok_a[ok_a["ablation"] == variant].groupby("seed")[metric].mean()
        vb = ok_b[ok_b["ablation"] == variant].groupby("seed")[metric].mean()
        # compare_arms pairs column `variant` (B) with column `reference` (A) by seed
        by_seed = pd.concat({"b": vb, "a": va}, axis=1)
        paired = by_seed.dropna()
        row = {"ablation": variant, "n_a": len(va), "n_b": len(vb),
               "a_mean": va.mean() if len(va) else np.nan,
               "b_mean": vb.mean() if len(vb) else np.nan,
               # bit for bit: the same machine and software stack rerunning the same trials
               "identical": bool(len(paired)) and bool((paired["a"] == paired["b"]).all())}
        row.update(compare_arms(vb.to_numpy(), va.to_numpy(), vb.index.to_numpy(),
                                va.index.to_numpy(), by_seed, "b", "a", 1 - alpha))
        compared.rows.append(row)
        contrast, differences = seed_contrast(vb, va)  # B against A: this variant's own ratio
        crossed = crossed_family(first[first["ablation"] == variant].assign(ablation="a"),
                                 by_seed, ["b"], reference="a")
        if crossed is not None:  # --cross-seeds grids: cells sharing a seed are not independent
            contrast = crossed.take(0)
            compared.crossed.append(len(compared.items))
        compared.items.append(contrast)
        compared.flagged.append(bool(robust_outliers(differences.to_numpy()))
                                if len(differences) else False)
        compared.instability.append(_instability(variant, *outcomes, direction))
    return compared


def _verdict_table(compared: _Compared, *, margin: float, relative: bool, alpha: float,
                   direction: int) -> pd.DataFrame:
    """The compared variants' table with their verdicts, one family (``margin``: in the
    metric's units, or a share of A's mean with ``relative``)."""
    table = pd.DataFrame(compared.rows)
    for column in ("n_pairs", "diff_mean", "diff_ci_low", "diff_ci_high", "p_value", "se",
                   "df"):
        if column not in table:
            table[column] = np.nan
    failures = _failure_tests(compared)
    tests = equivalence_tests(Contrasts.stack(compared.items), margin=margin,
                              relative=relative, alpha=alpha, direction=direction,
                              outlier=np.array(compared.flagged, dtype=bool), failures=failures)
    for column in ("p_value", "p_holm", "tost_ci_low", "tost_ci_high", "ratio_ci_low",
                   "ratio_ci_high", "p_tost_holm", "equivalence_bound_holm", "outlier",
                   "unstable", "verdict"):
        table[column] = tests[column]
    table["reason"] = verdict_reasons(failures.reason, tests["outlier"], tests["verdict"])
    table.loc[failures.composite, "test"] = "t + worst-rank"
    if compared.crossed:
        add_crossed_columns(table, table.index[compared.crossed],
                            Contrasts.stack(compared.items).take(np.array(compared.crossed)),
                            alpha)
    table["margin"] = margin
    return table[COLUMN_ORDER]


def _failure_tests(compared: _Compared) -> FailureTests:
    """The compared variants' training failures as one :class:`FailureTests`, without the
    worst-rank test on a crossed grid (its cells are not exchangeable one by one: no sign
    flips)."""
    instability = compared.instability
    failures = FailureTests(*(np.array([item[i] for item in instability], float)
                              for i in range(7)),
                            np.array([item[7] for item in instability], bool),
                            tuple(item[8] for item in instability))
    if compared.crossed:
        failures = failures.without_rank_test(np.isin(np.arange(len(compared.items)),
                                                      compared.crossed))
    return failures


def _instability(variant: str, finished_a: pd.DataFrame, failed_a: pd.DataFrame,
                 finished_b: pd.DataFrame, failed_b: pd.DataFrame, direction: int) -> tuple:
    """A variant's training failures in B against A (:class:`FailureTests`' fields, in
    order): the worst-rank test where a seed is discordant; never equivalent with more
    diverged seeds in B than in A."""
    va, fa = finished_a[variant], failed_a[variant]
    vb, fb = finished_b[variant], failed_b[variant]
    p, sign = paired_failure_test(vb, fb, va, fa, direction)
    seeds = vb.index.union(va.index)
    out_a = (fa.reindex(seeds, fill_value=False) | va.reindex(seeds).notna())
    out_b = (fb.reindex(seeds, fill_value=False) | vb.reindex(seeds).notna())
    both = out_a & out_b  # counted where both experiments have an outcome
    count_b = int((fb.reindex(seeds, fill_value=False) & both).sum())
    count_a = int((fa.reindex(seeds, fill_value=False) & both).sum())
    pairs = int(both.sum())
    reason = failure_reason(count_b, count_a, pairs, "A", " in B")
    return count_b, count_a, pairs, pairs, pairs, p, sign, count_b > count_a, reason


def compare_note(table: pd.DataFrame, *, a: str = "A", b: str = "B") -> str:
    """What :func:`compare_experiments`' table says, in a few lines."""
    attrs = table.attrs
    margin = (f"±{attrs['margin']:.1%} of each variant's mean in {a} (tested as a ratio)"
              if attrs.get("relative") else f"±{attrs['margin']:.3g}")
    lines = [f"{b} against {a} on {attrs['metric']}, per variant (Δ = {b} − {a}), margin "
             f"{margin}, alpha {attrs['alpha']:g}, Holm over {len(table)} variants."]
    # `negligible` is a significant change (within the margin): a change all the same, so a
    # note about a code change does not say "nothing changed" while one did
    changed = [f"{variant} (negligible: a significant change within the margin)"
               if verdict == "negligible" else variant
               for variant, verdict in zip(table["ablation"], table["verdict"])
               if verdict in ("worse", "better", "higher", "lower", "negligible",
                              "significant")]
    if changed:
        lines.append(f"Changed: {', '.join(changed)}.")
    elif (table["verdict"] == "equivalent").all():
        lines.append("No variant changed by more than the margin (every one equivalent).")
    else:
        undecided = table.loc[table["verdict"] == "inconclusive", "ablation"].tolist()
        lines.append("No variant changed significantly; not shown to be within the margin: "
                     f"{', '.join(undecided)} (more seeds would decide).")
    if "identical" in table and len(table) and table["identical"].all():
        lines.append("Identical to the last digit at every shared seed: the same code, data and "
                     "machine reproduce a run bit for bit (on another CPU or software stack "
                     "expect differences of about 1%, which the verdicts above judge).")
    elif "identical" in table and table["identical"].any():
        lines.append("Identical to the last digit at every shared seed: "
                     + ", ".join(table.loc[table["identical"], "ablation"]) + ".")
    if attrs.get("no_ok"):
        lines.append(f"Without an ok trial in both (not compared): {', '.join(attrs['no_ok'])}.")
    if attrs.get("crossed"):
        lines.append(CROSSED_NOTE)
    if (table["test"] == "Welch t").any():
        lines.append("Unpaired (Welch) where the two share fewer than two seeds: "
                     + ", ".join(table.loc[table["test"] == "Welch t", "ablation"]) + ".")
    for side, key in ((a, "only_in_a"), (b, "only_in_b")):
        if attrs[key]:
            lines.append(f"Only in {side} (not compared): {', '.join(attrs[key])}.")
    for side, key in ((a, "dropped_nan_a"), (b, "dropped_nan_b")):
        if attrs.get(key):
            lines.append(dropped_note(attrs[key], attrs["metric"], f" in {side}"))
    return "\n".join(lines)
