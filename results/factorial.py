"""Two-level factorial designs of boolean switches, and their analysis (docs/factorial.md).

A design crosses k switches (config keys whose values are booleans). Each factor is coded −1
at the reference cell's value (the space's reference variant, e.g. ``baseline``) and +1 at its
negation, so the reference cell is the run with every factor at −1.

- k ≤ 4: the full 2^k factorial (pyDOE3's ``ff2n``).
- 5 ≤ k ≤ 8: a 16-cell regular fraction of resolution IV or higher (pyDOE3's ``fracfact``)
  with the standard generators (:data:`GENERATORS`; Montgomery, *Design and Analysis of
  Experiments*, Table 8.14; the word-length pattern of pyDOE3's ``fracfact_opt``, so of
  minimum aberration), each word's sign chosen so that the reference cell is one of the runs.

:class:`FactorialDesign` holds the runs, the generators, the defining relation, the resolution
and the alias chains. :func:`factorial_effects` fits one ordinary least-squares model
(statsmodels) to every cell at every seed: the ±1 columns of every alias chain (the cells,
saturated) plus the seeds as blocks, and reports the main effects and two-factor interactions
with t intervals on the residual degrees of freedom, Holm over the family of effects, and a
verdict per effect at the project's margin rules (:mod:`results.verdicts`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from results.comparisons import usable_trials
from results.contrasts import OUTLIER_MIN_SEEDS, Contrasts, robust_outliers
from results.directions import metric_direction
from results.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    equivalence_tests,
    margin_text,
    parse_margin,
    resolve_margin,
)

MIN_FACTORS = 2
FULL_MAX_FACTORS = 4  # up to this many factors: every cell (2^k)
MAX_FACTORS = 8
LETTERS = "ABCDEFGH"
# The generators of the added factors (E, F, G, H) in terms of the first four, for a 16-cell
# fraction: 2^(5-1) V, 2^(6-2) IV, 2^(7-3) IV, 2^(8-4) IV. E = -ABCD rather than ABCD: the
# half fraction that holds the run with every factor at -1 (the reference cell).
GENERATORS: dict[int, tuple[str, ...]] = {
    5: ("E = -ABCD",),
    6: ("E = ABC", "F = BCD"),
    7: ("E = ABC", "F = BCD", "G = ACD"),
    8: ("E = BCD", "F = ACD", "G = ABC", "H = ABD"),
}
ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII"}


def word_name(word: Sequence[int]) -> str:
    """Factor indices -> letters: (0, 2) -> 'AC'."""
    return "".join(LETTERS[i] for i in sorted(word))


def pydoe_generator(k: int) -> str:
    """The generator string pyDOE3's ``fracfact`` reads for :data:`GENERATORS` [k]:
    'a b c d -abcd'."""
    added = [text.split("=")[1].strip().lower() for text in GENERATORS[k]]
    return " ".join(["a", "b", "c", "d", *added])


def design_runs(k: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """The runs (cells x k, ±1, the reference cell first) and the generators of the design
    for ``k`` factors: pyDOE3's full factorial for k ≤ 4, its fractional factorial with
    :data:`GENERATORS` for 5 ≤ k ≤ 8."""
    import pyDOE3

    if not MIN_FACTORS <= k <= MAX_FACTORS:
        raise ValueError(f"a factorial design takes {MIN_FACTORS} to {MAX_FACTORS} factors, "
                         f"got {k}")
    if k <= FULL_MAX_FACTORS:
        runs, generators = pyDOE3.ff2n(k), ()
    else:
        runs, generators = pyDOE3.fracfact(pydoe_generator(k)), GENERATORS[k]
    runs = np.asarray(runs, dtype=int)
    reference = np.flatnonzero((runs == -1).all(axis=1))
    if len(reference) != 1:  # pragma: no cover - the generators are chosen so that it is
        raise AssertionError(f"the {k}-factor design does not hold the reference cell once")
    order = [int(reference[0]), *(i for i in range(len(runs)) if i != reference[0])]
    return runs[order], generators


@dataclass(frozen=True)
class AliasChain:
    """Effects whose columns are equal up to sign in the design: ``words`` (factor-index
    tuples, shortest first) and ``signs`` (+1/-1: the word's column is sign x the first's)."""

    words: tuple[tuple[int, ...], ...]
    signs: tuple[int, ...]

    @property
    def order(self) -> int:
        return len(self.words[0])

    def text(self, names: Sequence[str] | None = None, max_order: int = 8) -> str:
        """'A:B = -C:D:E' (letters, or ``names``), words up to ``max_order`` factors."""
        parts = []
        for word, sign in zip(self.words, self.signs):
            if len(word) > max_order:
                continue
            label = ":".join(names[i] if names else LETTERS[i] for i in word)
            parts.append(("-" if sign < 0 else "") + label)
        return " = ".join(parts)


@dataclass(frozen=True)
class FactorialDesign:
    """A two-level design of boolean switches: ``factors`` (config keys, letters A, B, ... in
    this order), ``reference`` (each one's value in the reference cell, coded −1), ``runs``
    (cells x factors, ±1, the reference cell first), ``generators`` (empty for a full
    factorial) and ``cells`` (each run's name; the reference cell's is the space's
    reference variant)."""

    factors: tuple[str, ...]
    reference: tuple[bool, ...]
    runs: np.ndarray
    generators: tuple[str, ...]
    cells: tuple[str, ...]
    chains: tuple[AliasChain, ...] = field(init=False, repr=False)
    defining: tuple[tuple[int, tuple[int, ...]], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        chains, defining = alias_structure(self.runs)
        object.__setattr__(self, "chains", chains)
        object.__setattr__(self, "defining", defining)

    @classmethod
    def plan(cls, factors: Sequence[str], reference: Sequence[bool],
             reference_name: str = "baseline") -> FactorialDesign:
        """The design for these factors (at the reference cell's values)."""
        runs, generators = design_runs(len(factors))
        names = tuple(cell_name(row, factors, reference, reference_name) for row in runs)
        if len(set(names)) != len(names):  # pragma: no cover - distinct rows, distinct names
            raise AssertionError("two cells share a name")
        return cls(tuple(factors), tuple(bool(v) for v in reference), runs, generators, names)

    # ------------------------------------------------------------------ properties

    @property
    def k(self) -> int:
        return len(self.factors)

    @property
    def fraction(self) -> int:
        """p of a 2^(k-p) design (0: every cell)."""
        return len(self.generators)

    @property
    def resolution(self) -> int | None:
        """The length of the shortest word of the defining relation; None for a full
        factorial (no word)."""
        return min((len(word) for _, word in self.defining), default=None)

    @property
    def label(self) -> str:
        """'2^3 full factorial' or '2^(8-4) fractional factorial, resolution IV'."""
        if not self.fraction:
            return f"2^{self.k} full factorial"
        return (f"2^({self.k}-{self.fraction}) fractional factorial, resolution "
                f"{ROMAN.get(self.resolution, self.resolution)}")

    def defining_relation(self) -> str:
        """'I = BCDE = ACDF = ...' (a word's sign where it is -), '' for a full factorial."""
        if not self.defining:
            return ""
        return "I = " + " = ".join(("-" if sign < 0 else "") + word_name(word)
                                   for sign, word in self.defining)

    def level(self, factor: int, coded: int) -> bool:
        """The config value of ``factor`` at coded level −1 (the reference's) or +1."""
        return self.reference[factor] if coded < 0 else not self.reference[factor]

    def cell_overrides(self, cell: int) -> dict[str, bool]:
        """The config values of cell ``cell``, one per factor."""
        return {name: self.level(i, int(c)) for i, (name, c) in
                enumerate(zip(self.factors, self.runs[cell]))}

    def effects(self) -> list[tuple[str, str, AliasChain]]:
        """The effects reported: (name, kind, chain) for every chain whose shortest word has
        one factor (``main``) or two (``interaction``), mains first."""
        out = []
        for chain in sorted(self.chains, key=lambda c: (c.order, c.words[0])):
            if chain.order <= 2:
                name = word_name(chain.words[0])
                name = name if chain.order == 1 else f"{name[0]}:{name[1]}"
                out.append((name, "main" if chain.order == 1 else "interaction", chain))
        return out

    def legend(self) -> str:
        """'A temporal_attention (true -> false), B ...'."""
        return ", ".join(
            f"{LETTERS[i]} {name} ({str(value).lower()} -> {str(not value).lower()})"
            for i, (name, value) in enumerate(zip(self.factors, self.reference)))

    def lines(self) -> list[str]:
        """What ``--dry-run`` prints about the design."""
        lines = [f"Design: {self.label}, {len(self.runs)} cells, every cell at every seed "
                 "(paired); the reference cell is the space's reference",
                 f"Factors (-1: the reference cell's value, +1: its negation): {self.legend()}"]
        if self.generators:
            lines.append(f"Generators: {', '.join(self.generators)}; defining relation: "
                         f"{self.defining_relation()}")
            aliased = [chain.text(max_order=3) for _, _, chain in self.effects()
                       if len(chain.words) > 1 and chain.words[1] and len(chain.words[1]) <= 3]
            if aliased:
                lines.append("Aliases (up to three-factor interactions): " + "; ".join(aliased))
        return lines

    def to_dict(self) -> dict[str, Any]:
        """experiment.json's record of the design."""
        return {
            "factors": list(self.factors),
            "reference_values": list(self.reference),
            "letters": {LETTERS[i]: name for i, name in enumerate(self.factors)},
            "label": self.label,
            "generators": list(self.generators),
            "pydoe3_generator": pydoe_generator(self.k) if self.generators else None,
            "defining_relation": self.defining_relation(),
            "resolution": self.resolution,
            "cells": {name: [int(v) for v in row] for name, row in zip(self.cells, self.runs)},
            "effects": {name: chain.text() for name, _, chain in self.effects()},
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> FactorialDesign:
        cells = record["cells"]
        return cls(tuple(record["factors"]), tuple(bool(v) for v in record["reference_values"]),
                   np.array(list(cells.values()), dtype=int), tuple(record["generators"]),
                   tuple(cells))


def cell_name(row: Sequence[int], factors: Sequence[str], reference: Sequence[bool],
              reference_name: str) -> str:
    """The reference cell is ``reference_name``; another cell names the switches it flips:
    ``no_<key>`` for one on in the reference, ``with_<key>`` for one off (a leading ``use_``
    dropped: ``no_scalars``), joined by '-' (``cell-<levels>``, 1 = flipped, where that would
    pass 100 characters)."""
    flipped = [i for i, c in enumerate(row) if c > 0]
    if not flipped:
        return reference_name
    name = "-".join(("no_" if reference[i] else "with_") + factors[i].removeprefix("use_")
                    for i in flipped)
    if len(name) > 100:
        name = "cell-" + "".join("1" if c > 0 else "0" for c in row)
    return name


def alias_structure(runs: np.ndarray
                    ) -> tuple[tuple[AliasChain, ...], tuple[tuple[int, tuple[int, ...]], ...]]:
    """The alias chains of ``runs`` (every word of 1..k factors grouped by its column up to
    sign; shortest word first) and the defining relation (the words whose column is constant:
    (sign, word) with I = sign x word)."""
    runs = np.asarray(runs, dtype=int)
    k = runs.shape[1]
    groups: dict[bytes, list[tuple[tuple[int, ...], int]]] = {}
    defining = []
    for order in range(1, k + 1):
        for word in itertools.combinations(range(k), order):
            column = runs[:, list(word)].prod(axis=1)
            if (column == column[0]).all():
                defining.append((int(column[0]), word))
                continue
            sign = int(column[0])  # normalised: the first run's entry +1
            groups.setdefault((column * sign).tobytes(), []).append((word, sign))
    chains = []
    for members in groups.values():
        first_sign = members[0][1]
        chains.append(AliasChain(tuple(w for w, _ in members),
                                 tuple(s * first_sign for _, s in members)))
    chains.sort(key=lambda c: (c.order, c.words[0]))
    return tuple(chains), tuple(defining)


# ---------------------------------------------------------------------------- the analysis


def _model(design: FactorialDesign, cells: np.ndarray, seeds: np.ndarray, seed_levels
           ) -> np.ndarray:
    """Rows of the model matrix: intercept, seed blocks (treatment coding, the first seed the
    base), then one ±1 column per alias chain (the cells, saturated)."""
    blocks = (seeds[:, None] == np.asarray(seed_levels)[None, 1:]).astype(float)
    columns = [design.runs[cells][:, list(chain.words[0])].prod(axis=1)
               for chain in design.chains]
    return np.column_stack([np.ones(len(cells)), blocks, *columns]).astype(float)


EFFECT_SCALE = {"main": 2.0, "interaction": 4.0}


def factorial_effects(trials: pd.DataFrame, design: FactorialDesign, *,
                      metric: str = "test_mae", margin: str | float = DEFAULT_MARGIN,
                      alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """The main effects and two-factor interactions of a factorial run on ``metric``.

    One OLS fit (statsmodels) of the ok trials of the design's cells: an intercept, the seeds
    as blocks, and the ±1 column of every alias chain (so the cells are saturated and the
    residual is the seed x cell interaction, with (cells − 1)(seeds − 1) degrees of freedom
    when every cell ran at every seed). From its coefficients β and their covariance:

    - a main effect is 2·β_A: the mean change of the metric when A is flipped from the
      reference cell's value, averaged over the other factors' levels;
    - a two-factor interaction is 4·β_AB = y(A and B flipped) − y(A) − y(B) + y(reference),
      averaged over the other factors: how far flipping both departs from the sum of flipping
      each (positive: worse than additive for a lower-is-better metric). In a fraction it is
      the sum over its alias chain (``aliases``).

    Each effect gets a t interval, a two-sided t test (``p_value``; Holm over the family of
    effects: ``p_holm``) and the TOST against the margin (Holm: ``p_tost_holm``), hence a
    verdict as :func:`results.verdicts.equivalence_tests` gives one: worse/better, equivalent,
    negligible, inconclusive. A margin in the metric's units is used as it is; a percentage is
    that share of the reference cell's mean, tested as a ratio: the TOST contrasts are
    effect ∓ m·(reference cell's mean), both estimated by the one fit, so the reference
    mean's own error is inside the test (Fieller; :class:`results.contrasts.Contrasts`).
    An effect whose per-seed estimates hold an outlier (the robustness rule) is never
    `equivalent`.

    Raises:
        ValueError: no ok trial in some cell, fewer than two seeds (no residual), a bad margin
            or α, a relative margin with a reference mean not above 0.
    """
    import statsmodels.api as sm

    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    parse_margin(margin)
    ok, dropped = usable_trials(trials, metric)
    index = {name: i for i, name in enumerate(design.cells)}
    ok = ok[ok["ablation"].astype(str).isin(index)]
    missing = [name for name in design.cells if name not in set(ok["ablation"].astype(str))]
    if missing:
        raise ValueError(f"factorial cell {missing[0]} has no ok trial with a finite {metric}: "
                         "the effects cannot be estimated")
    cells = ok["ablation"].astype(str).map(index).to_numpy()
    seeds = ok["seed"].to_numpy()
    seed_levels = sorted(set(seeds.tolist()))
    y = ok[metric].to_numpy(dtype=float)
    x = _model(design, cells, seeds, seed_levels)
    fit = sm.OLS(y, x).fit()
    if fit.df_resid < 1 or np.linalg.matrix_rank(x) < x.shape[1]:
        raise ValueError("the factorial effects need every cell at two or more seeds "
                         f"(here {len(seed_levels)} seed(s), {len(y)} ok trials for "
                         f"{len(design.cells)} cells)")
    beta, cov = np.asarray(fit.params), np.asarray(fit.cov_params())
    # the reference cell's fitted mean over the seeds run: its model row, averaged over seeds
    reference_row = _model(design, np.zeros(len(seed_levels), int), np.array(seed_levels),
                           seed_levels).mean(axis=0)
    effects = design.effects()
    first = 1 + len(seed_levels) - 1
    weights = np.zeros((len(effects), x.shape[1]))
    for j, (_, kind, chain) in enumerate(effects):
        weights[j, first + design.chains.index(chain)] = EFFECT_SCALE[kind]
    contrasts = Contrasts(
        diff=weights @ beta, ref_mean=np.full(len(effects), reference_row @ beta),
        var_diff=np.einsum("ij,jk,ik->i", weights, cov, weights),
        cov=weights @ cov @ reference_row,
        var_ref=np.full(len(effects), reference_row @ cov @ reference_row),
        df=np.full(len(effects), float(fit.df_resid)))
    value, relative = resolve_margin(margin, float(reference_row @ beta))
    direction = metric_direction(metric)
    outlier = robust_outliers(per_seed_effects(design, cells, seeds, y, seed_levels, weights,
                                               first))
    tests = equivalence_tests(contrasts, margin=value, relative=relative, alpha=alpha,
                              direction=direction, outlier=outlier)
    low, high = contrasts.interval(alpha / 2, False)  # the 1 − α two-sided t interval
    table = pd.DataFrame({
        "effect": [name for name, _, _ in effects],
        "kind": [kind for _, kind, _ in effects],
        "factors": [" x ".join(design.factors[i] for i in chain.words[0])
                    for _, _, chain in effects],
        "aliases": [chain.text(max_order=3).partition(" = ")[2] for _, _, chain in effects],
        "estimate": contrasts.diff, "se": contrasts.se, "df": contrasts.df,
        "ci_low": low, "ci_high": high,
        **{name: tests[name] for name in (
            "tost_ci_low", "tost_ci_high", "ratio", "ratio_ci_low", "ratio_ci_high",
            "p_value", "p_holm", "p_tost", "p_tost_holm", "equivalence_bound_holm",
            "outlier", "verdict")},
    })
    table["margin"] = value
    table.attrs.update(metric=metric, reference=design.cells[0],
                       reference_mean=float(reference_row @ beta), margin=value,
                       relative=relative, margin_given=str(margin), alpha=alpha,
                       direction=direction, design=design.label, seeds=len(seed_levels),
                       cells=len(design.cells), df=float(fit.df_resid),
                       comparisons=len(effects), dropped_nan=dropped)
    return table


def per_seed_effects(design: FactorialDesign, cells: np.ndarray, seeds: np.ndarray,
                     y: np.ndarray, seed_levels: Sequence[int], weights: np.ndarray,
                     first: int) -> np.ndarray:
    """Each effect estimated within each seed alone (effects x seeds; NaN for a seed missing
    a cell): what the robustness rule reads."""
    out = np.full((len(weights), len(seed_levels)), np.nan)
    if len(seed_levels) < OUTLIER_MIN_SEEDS:  # no rule below that many seeds
        return out
    n_cells = len(design.cells)
    x = _model(design, np.arange(n_cells), np.full(n_cells, seed_levels[0]), seed_levels)
    # a seed's cell means -> the chains' coefficients (the cells saturate the model)
    solve = np.linalg.pinv(np.column_stack([np.ones(n_cells), x[:, first:]]))[1:]
    to_effects = weights[:, first:] @ solve  # effects x cells
    for s, seed in enumerate(seed_levels):
        mine = seeds == seed
        counts = np.bincount(cells[mine], minlength=n_cells)
        if (counts == 0).any():
            continue
        means = np.bincount(cells[mine], weights=y[mine], minlength=n_cells) / counts
        out[:, s] = to_effects @ means
    return out


def interaction_means(trials: pd.DataFrame, design: FactorialDesign, *,
                      metric: str = "test_mae") -> pd.DataFrame:
    """For each reported two-factor interaction A:B, the mean of ``metric`` over the ok
    trials at each of the four level combinations (averaged over the other factors and the
    seeds): columns effect, a, b (the two factors), a_level, b_level (-1: the reference's
    value, +1: flipped), a_value, b_value (the config values there), mean, n."""
    ok, _ = usable_trials(trials, metric)
    index = {name: i for i, name in enumerate(design.cells)}
    ok = ok[ok["ablation"].astype(str).isin(index)]
    runs = design.runs[ok["ablation"].astype(str).map(index).to_numpy()]
    rows = []
    for name, kind, chain in design.effects():
        if kind != "interaction":
            continue
        a, b = chain.words[0]
        for la, lb in itertools.product((-1, 1), repeat=2):
            mine = (runs[:, a] == la) & (runs[:, b] == lb)
            values = ok[metric].to_numpy(dtype=float)[mine]
            rows.append({"effect": name, "a": design.factors[a], "b": design.factors[b],
                         "a_level": la, "b_level": lb, "a_value": design.level(a, la),
                         "b_value": design.level(b, lb),
                         "mean": values.mean() if len(values) else np.nan,
                         "n": int(len(values))})
    return pd.DataFrame(rows)


def factorial_note(table: pd.DataFrame) -> str:
    """What the effects table's numbers and verdicts mean, with its margin and α."""
    a = table.attrs
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    return (f"{a['design']}, {a['cells']} cells x {a['seeds']} seeds; effects on "
            f"{a['metric']} ({better[a['direction']]}) by OLS on ±1-coded factors with the "
            f"seeds as blocks ({a['df']:.0f} residual df). A main effect: the mean change when "
            "the switch is flipped from the reference cell's value; an interaction A:B: "
            "y(both flipped) − y(A) − y(B) + y(reference), averaged over the other factors "
            "(with its aliases in a fraction). Margin "
            f"{margin_text(a)}, alpha {a['alpha']:g}, Holm over {a['comparisons']} effects: "
            "worse/better = differs (t test); equivalent = TOST, the "
            f"{1 - 2 * a['alpha']:.0%} interval inside the margin; negligible = both; "
            "inconclusive = neither.")


def effects_view(table: pd.DataFrame) -> pd.DataFrame:
    """The effects table as the console and the report show it (numbers as text)."""
    relative = table.attrs.get("relative")

    def fmt(value: float, digits: int = 3) -> str:
        return "-" if not np.isfinite(value) else f"{value:+.{digits}f}"

    rows = []
    for _, row in table.iterrows():
        bound = row["equivalence_bound_holm"]
        rows.append({
            "effect": row["effect"], "factors": row["factors"],
            "aliases": row["aliases"] or "-",
            "estimate": fmt(row["estimate"]),
            "ci": f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]",
            "share_of_ref": fmt(100 * row["ratio"], 1) + "%",
            "p_holm": f"{row['p_holm']:.3g}",
            "verdict": row["verdict"],
            "equiv_bound": "-" if not np.isfinite(bound) else (
                f"{bound:.1%}" if relative else f"{bound:.3f}"),
        })
    return pd.DataFrame(rows)
