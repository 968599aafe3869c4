"""Two-level factorial designs of boolean switches: the cells and their aliases
(docs/factorial.md). What planning a ``--design factorial`` run needs; the analysis of its
trials is :mod:`ablations.results.stats.factorial`.

A design crosses k switches (config keys whose values are booleans). Each factor is coded −1
at the reference cell's value (the space's reference variant, e.g. ``baseline``) and +1 at its
negation, so the reference cell is the run with every factor at −1.

- k ≤ 4: the full 2^k factorial (pyDOE3's ``ff2n``).
- 5 ≤ k ≤ 8: a 16-cell regular fraction of resolution IV or higher (pyDOE3's ``fracfact``)
  with the standard generators (:data:`GENERATORS`; Montgomery, *Design and Analysis of
  Experiments*, Table 8.14; the word-length pattern of pyDOE3's ``fracfact_opt``, so of
  minimum aberration), each word's sign chosen so that the reference cell is one of the runs.

:class:`FactorialDesign` holds the runs, the generators, the defining relation, the resolution
and the alias chains.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ablations.config.comparison import DEFAULT_REFERENCE

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
             reference_name: str = DEFAULT_REFERENCE) -> FactorialDesign:
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
