"""Factorial designs (--design factorial): the designs against pyDOE3 and hand values, the
analysis against an independent least-squares computation, its error rates on simulated runs,
the command line's refusals and dry run, and a real run on Ray (slow)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pyDOE3
import pytest

from ablations.cli.main import main
from ablations.results.stats.factorial import factorial_effects, interaction_means
from ablations.results.stats.factorial_design import GENERATORS, FactorialDesign, pydoe_generator
from tests.conftest import run_here

NAMES = ["f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"]


def design(k: int, reference=None) -> FactorialDesign:
    return FactorialDesign.plan(NAMES[:k], reference or [True] * k)


def rows_of(array) -> set[tuple[int, ...]]:
    return {tuple(int(v) for v in row) for row in np.asarray(array)}


# ------------------------------------------------------------------------------ the designs


@pytest.mark.parametrize("k", [2, 3, 4])
def test_full_factorials_are_every_cell_once(k):
    d = design(k)
    assert len(d.runs) == 2 ** k and rows_of(d.runs) == rows_of(pyDOE3.ff2n(k))
    assert rows_of(d.runs) == set(itertools.product((-1, 1), repeat=k))
    assert (d.runs[0] == -1).all() and d.cells[0] == "baseline"
    assert d.generators == () and d.resolution is None and d.defining_relation() == ""
    assert d.label == f"2^{k} full factorial"
    effects = d.effects()
    assert [name for name, _, _ in effects] == (
        [chr(65 + i) for i in range(k)]
        + [f"{chr(65 + i)}:{chr(65 + j)}" for i, j in itertools.combinations(range(k), 2)])
    assert all(len(chain.words) == 1 for _, _, chain in effects)  # nothing aliased
    assert len(d.chains) == 2 ** k - 1  # every word its own column: the cells saturated


# The defining relations of the standard 16-run fractions, worked out by hand from the
# generators (I = E·ABC = F·BCD = ..., and their products).
DEFINING = {
    5: "I = -ABCDE",
    6: "I = ABCE = ADEF = BCDF",
    7: "I = ABCE = ABFG = ACDG = ADEF = BCDF = BDEG = CEFG",
    8: "I = ABCG = ABDH = ABEF = ACDF = ACEH = ADEG = AFGH = BCDE = BCFH = BDFG = BEGH = "
       "CDGH = CEFG = DEFH = ABCDEFGH",  # 2^4 - 1 words: fourteen of four letters, one of 8
}


@pytest.mark.parametrize("k", [5, 6, 7, 8])
def test_fractions_are_pydoe3s_with_the_standard_generators(k):
    d = design(k)
    assert len(d.runs) == 16
    assert rows_of(d.runs) == rows_of(pyDOE3.fracfact(pydoe_generator(k)))
    assert d.generators == GENERATORS[k]
    assert d.generators == {5: ("E = -ABCD",), 6: ("E = ABC", "F = BCD"),
                            7: ("E = ABC", "F = BCD", "G = ACD"),
                            8: ("E = BCD", "F = ACD", "G = ABC", "H = ABD")}[k]
    for text in d.generators:  # each added column is the product its generator says
        added, _, word = text.partition(" = ")
        sign = -1 if word.startswith("-") else 1
        column = d.runs[:, [ord(c) - 65 for c in word.lstrip("-")]].prod(axis=1)
        assert (d.runs[:, ord(added) - 65] == sign * column).all()
    assert d.defining_relation() == DEFINING[k]
    # the same word-length pattern (so aberration) as the design pyDOE3's search picks
    from collections import Counter

    from ablations.results.stats.factorial_design import alias_structure

    best = alias_structure(pyDOE3.fracfact(pyDOE3.fracfact_opt(k, k - 4)[0]))[1]
    assert Counter(len(w) for _, w in d.defining) == Counter(len(w) for _, w in best)
    assert d.resolution == (5 if k == 5 else 4)
    assert d.label.endswith("resolution V" if k == 5 else "resolution IV")
    assert ((d.runs == -1).all(axis=1)).sum() == 1 and (d.runs[0] == -1).all()  # reference in
    # any two factors: all four combinations, four times each (a full 2^2 in projection)
    for i, j in itertools.combinations(range(k), 2):
        pairs = pd.Series(list(zip(d.runs[:, i], d.runs[:, j]))).value_counts()
        assert len(pairs) == 4 and (pairs == 4).all()
    # resolution IV: a main effect is aliased with no main effect or two-factor interaction
    for _, kind, chain in d.effects():
        if kind == "main":
            assert all(len(word) >= 3 for word in chain.words[1:])


def test_alias_chains_match_hand_values_and_pydoe3():
    d = design(6)
    texts = {name: chain.text() for name, _, chain in d.effects()}
    # from I = ABCE = ADEF = BCDF: AB·ABCE = CE, AB·ADEF = BDEF, AB·BCDF = ACDF
    assert texts["A:B"] == "A:B = C:E = A:C:D:F = B:D:E:F"
    assert texts["A:E"] == "A:E = B:C = D:F = A:B:C:D:E:F"
    assert texts["A"] == "A = B:C:E = D:E:F = A:B:C:D:F"
    assert [name for name, _, _ in d.effects()] == [
        "A", "B", "C", "D", "E", "F", "A:B", "A:C", "A:D", "A:E", "A:F", "B:D", "B:F"]
    # every chain is one of pyDOE3's alias groups (as sets of words)
    aliases = pyDOE3.fracfact_aliasing(pyDOE3.fracfact(pydoe_generator(6)))[0]
    theirs = {frozenset(group.split(" = ")) for group in aliases}
    for chain in d.chains:
        words = frozenset("".join(chr(97 + i) for i in word) for word in chain.words)
        assert words in theirs
    # resolution V (k = 5): two-factor interactions are aliased only with three-factor ones,
    # with the sign of I = -ABCDE
    d5 = design(5)
    for name, kind, chain in d5.effects():
        assert all(len(word) >= (4 if kind == "main" else 3) for word in chain.words[1:])
    assert {n: c.text() for n, _, c in d5.effects()}["A:B"] == "A:B = -C:D:E"


def test_the_reference_cell_takes_each_factors_value_and_cells_name_the_flips():
    d = FactorialDesign.plan(["temporal_attention", "use_scalars", "gradient_checkpointing"],
                             [True, True, False])
    assert d.cell_overrides(0) == {"temporal_attention": True, "use_scalars": True,
                                   "gradient_checkpointing": False}
    last = int(np.flatnonzero((d.runs == 1).all(axis=1))[0])
    assert d.cell_overrides(last) == {"temporal_attention": False, "use_scalars": False,
                                      "gradient_checkpointing": True}
    assert d.cells[last] == "no_temporal_attention-no_scalars-with_gradient_checkpointing"
    again = FactorialDesign.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again.cells == d.cells and (again.runs == d.runs).all()
    assert again.reference == d.reference and again.generators == d.generators


# ------------------------------------------------------------------------------ the analysis


def table_of(d: FactorialDesign, values: np.ndarray, seeds) -> pd.DataFrame:
    """values: (cells, seeds)."""
    return pd.DataFrame([{"ablation": name, "seed": seed, "status": "ok",
                          "test_mae": values[c, s]}
                         for c, name in enumerate(d.cells) for s, seed in enumerate(seeds)])


def test_effects_match_least_squares_and_hand_contrasts():
    """Against numpy's lstsq on a hand-built model (every interaction, seed dummies) and the
    textbook contrasts of cell means."""
    rng = np.random.default_rng(3)
    d = design(3)
    seeds = [0, 1, 2, 5]
    values = 0.6 + rng.normal(0, 0.05, (len(d.cells), len(seeds))) \
        + rng.normal(0, 0.05, len(seeds))
    table = factorial_effects(table_of(d, values, seeds), d, margin="0.03", alpha=0.05)
    y = values.reshape(-1)
    cell = np.repeat(np.arange(len(d.cells)), len(seeds))
    seed = np.tile(np.arange(len(seeds)), len(d.cells))
    words = [w for r in (1, 2, 3) for w in itertools.combinations(range(3), r)]
    x = np.column_stack([np.ones(len(y))]
                        + [(seed == s).astype(float) for s in range(1, len(seeds))]
                        + [d.runs[cell][:, list(w)].prod(axis=1) for w in words])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ beta
    df = len(y) - x.shape[1]
    sigma2 = residual @ residual / df
    cov = sigma2 * np.linalg.inv(x.T @ x)
    first = len(seeds)
    for j, w in enumerate(words[:6]):  # the mains and two-factor interactions
        scale = 2 if len(w) == 1 else 4
        row = table.iloc[j]
        assert row["estimate"] == pytest.approx(scale * beta[first + j], abs=1e-12)
        assert row["se"] == pytest.approx(scale * np.sqrt(cov[first + j, first + j]), rel=1e-9)
        assert row["df"] == df == (8 - 1) * (4 - 1)
    means = values.mean(axis=1)
    runs = d.runs
    # main effect: mean where flipped minus mean at the reference value
    assert table.iloc[0]["estimate"] == pytest.approx(
        means[runs[:, 0] > 0].mean() - means[runs[:, 0] < 0].mean())
    # interaction: y(both) - y(A) - y(B) + y(neither), averaged over C
    cellmean = {(a, b): means[(runs[:, 0] == a) & (runs[:, 1] == b)].mean()
                for a in (-1, 1) for b in (-1, 1)}
    assert table.iloc[3]["estimate"] == pytest.approx(
        cellmean[1, 1] - cellmean[1, -1] - cellmean[-1, 1] + cellmean[-1, -1])
    # the two-sided 95% t interval, and the TOST at the absolute margin by hand
    from scipy import stats

    t = stats.t.ppf(0.975, df)
    assert table.iloc[0]["ci_high"] - table.iloc[0]["ci_low"] == pytest.approx(
        2 * t * table.iloc[0]["se"])
    e, se = table.iloc[1]["estimate"], table.iloc[1]["se"]
    p_tost = max(stats.t.sf((e + 0.03) / se, df), stats.t.cdf((e - 0.03) / se, df))
    assert table.iloc[1]["p_tost"] == pytest.approx(p_tost)
    assert table.iloc[1]["p_value"] == pytest.approx(2 * stats.t.sf(abs(e) / se, df))


def test_a_relative_margin_tests_the_effect_against_the_estimated_reference_mean():
    """5% of the reference cell's mean, the mean estimated: the contrasts effect -/+ m x
    (reference cell's mean) over the observations, their variance from the residual."""
    from scipy import stats

    rng = np.random.default_rng(4)
    d = design(2)
    seeds = [0, 1, 2]
    values = 0.5 + rng.normal(0, 0.02, (4, 3))
    table = factorial_effects(table_of(d, values, seeds), d, margin="5%")
    n_cells, n = values.shape
    residual = values - values.mean(axis=1, keepdims=True) - values.mean(axis=0) + values.mean()
    sigma2 = (residual ** 2).sum() / ((n_cells - 1) * (n - 1))
    weights_main = np.where(d.runs[:, 0] > 0, 1, -1) / (n_cells / 2)  # per cell mean
    weights_ref = np.eye(n_cells)[0]
    for sign in (+1, -1):
        w = weights_main + sign * 0.05 * weights_ref  # effect + m·ref (H1 above -m)
        estimate = w @ values.mean(axis=1)
        se = np.sqrt(sigma2 * (w ** 2).sum() / n)
        if sign > 0:
            p_low = stats.t.sf(estimate / se, (n_cells - 1) * (n - 1))
        else:
            p_high = stats.t.cdf(estimate / se, (n_cells - 1) * (n - 1))
    assert table.iloc[0]["p_tost"] == pytest.approx(max(p_low, p_high))
    assert table.attrs["reference_mean"] == pytest.approx(values[0].mean())
    assert table.iloc[0]["ratio"] == pytest.approx(table.iloc[0]["estimate"]
                                                   / values[0].mean())


def test_a_fraction_estimates_the_aliased_sum_and_a_missing_cell_is_refused():
    d = design(6)
    seeds = [0, 1]
    runs = d.runs
    # y = 0.5 + 0.1·[A flipped] + an A:B interaction of 0.05 and a C:E one of 0.03 (each
    # y(both) - y(one) - y(other) + y(neither), so 4 x the coefficient of the ±1 product)
    truth = (0.5 + 0.1 * (runs[:, 0] > 0) + 0.05 / 4 * runs[:, 0] * runs[:, 1]
             + 0.03 / 4 * runs[:, 2] * runs[:, 4])
    values = np.repeat(truth[:, None], 2, axis=1) + np.array([[0.0, 0.001]]) \
        + 1e-4 * np.random.default_rng(0).normal(size=(16, 2))
    table = factorial_effects(table_of(d, values, seeds), d, margin="0.5").set_index("effect")
    assert table.loc["A", "estimate"] == pytest.approx(0.1, abs=1e-3)
    assert table.loc["A:B", "aliases"] == "C:E"
    # the A:B chain estimates both interactions of the chain, each as 4 x its coefficient
    assert table.loc["A:B", "estimate"] == pytest.approx(0.05 + 0.03, abs=2e-3)
    assert table.attrs["df"] == 15
    broken = table_of(d, values, seeds)
    broken = broken[broken["ablation"] != d.cells[5]]
    with pytest.raises(ValueError, match=f"cell {d.cells[5]} has no ok trial"):
        factorial_effects(broken, d)
    with pytest.raises(ValueError, match="two or more seeds"):
        factorial_effects(table_of(d, values[:, :1], [0]), d)


def simulate(d: FactorialDesign, truth: np.ndarray, n_seeds: int, rng, sd: float = 0.02,
             shared: float = 0.1) -> pd.DataFrame:
    """One simulated run: each cell's mean x (1 + a seed effect shared by every cell) +
    noise, as docs/verdicts.md's simulations."""
    u = rng.normal(0, shared, n_seeds)
    values = truth[:, None] * (1 + u[None, :]) + rng.normal(0, sd, (len(truth), n_seeds))
    return table_of(d, values, list(range(n_seeds)))


@pytest.mark.slow  # a simulation of many experiments
def test_simulated_runs_find_no_interaction_where_none_is_and_find_a_planted_one():
    """The exact analysis on simulated 2^3 runs at 3 seeds: switches whose effects add up (A
    costs 10%, B and C nothing) get no `worse`/`better` interaction (nor a main effect where
    there is none) in more than alpha + 3 Monte-Carlo s.e. of the runs; an interaction at
    the margin is called `equivalent` no more often; a planted interaction is found."""
    rng = np.random.default_rng(20)
    d = design(3)
    runs = d.runs
    additive = 0.55 * (1 + 0.10 * (runs[:, 0] > 0))
    count, alpha = 600, 0.05
    limit = alpha + 3 * np.sqrt(alpha * (1 - alpha) / count)
    false_effect = 0
    for _ in range(count):
        table = factorial_effects(simulate(d, additive, 3, rng), d, margin="5%")
        null = table[table["effect"] != "A"]
        false_effect += null["verdict"].isin(["worse", "better", "negligible"]).any()
    assert false_effect / count <= limit
    # an A:B interaction exactly at the margin (5% of the reference's mean): never
    # `equivalent` beyond the nominal rate
    both = (runs[:, 0] > 0) & (runs[:, 1] > 0)
    at_margin = 0.55 * (1 + 0.05 * both)
    false_equivalent = sum(
        factorial_effects(simulate(d, at_margin, 5, rng, sd=0.01), d, margin="5%")
        .set_index("effect").loc["A:B", "verdict"] == "equivalent" for _ in range(count))
    assert false_equivalent / count <= limit
    # a planted interaction (flipping A and B together costs 20% more than the sum)
    planted = 0.55 * (1 + 0.20 * both)
    found = sum(factorial_effects(simulate(d, planted, 3, rng), d, margin="5%")
                .set_index("effect").loc["A:B", "verdict"] == "worse" for _ in range(200))
    assert found / 200 >= 0.9


def test_interaction_means_average_over_the_other_factors():
    d = design(3)
    values = np.arange(8, dtype=float)[:, None] + np.zeros((8, 2))
    means = interaction_means(table_of(d, values, [0, 1]), d)
    ab = means[means["effect"] == "A:B"].set_index(["a_level", "b_level"])["mean"]
    runs = d.runs
    for a, b in itertools.product((-1, 1), repeat=2):
        assert ab[a, b] == pytest.approx(np.arange(8)[(runs[:, 0] == a)
                                                      & (runs[:, 1] == b)].mean())


# ------------------------------------------------------------------------------ the command line


def in_process(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


FACTORS = "temporal_attention,spatial_attention,use_scalars"


@pytest.mark.parametrize(("args", "pattern"), [
    (["--design", "factorial", "--factors", "temporal_atention,spatial_attention"],
     "--factors: unknown key 'temporal_atention'; did you mean 'temporal_attention'?"),
    (["--design", "factorial", "--factors", "cnn_widths,spatial_attention"],
     "--factors: cnn_widths is not a boolean switch"),
    (["--design", "factorial", "--factors", "spatial_attention"], "1 factor(s)"),
    (["--design", "factorial", "--factors", ",".join(f"k{i}" for i in range(9))],
     "9 factor(s); a factorial design takes 2 to 8"),
    (["--design", "factorial", "--factors", "spatial_attention,spatial_attention"],
     "given twice"),
    (["--design", "factorial", "--factors", FACTORS, "--seeds", "auto"],
     "--design factorial runs every cell at the same fixed seeds"),
    (["--design", "factorial", "--factors", FACTORS, "--space", "hpo"],
     "space hpo is a search"),
    (["--design", "factorial", "--factors", FACTORS, "--seeds", "1"], "at least 2 seeds"),
    (["--design", "factorial", "--factors", FACTORS, "--only", "baseline"],
     "--only does not combine with --design factorial"),
    (["--design", "factorial"], "--design factorial needs --factors"),
    (["--factors", FACTORS], "--factors applies with --design factorial only"),
    (["--design", "factorial", "--factors", "use_images,use_scalars"], "no input"),
    (["--design", "fractional"], "--design 'fractional': choose one of table, factorial"),
])
def test_bad_factorial_input_is_one_line_and_exit_2(capsys, tmp_path, args, pattern):
    code, _, err = in_process(capsys, *args, "--storage", str(tmp_path / "results"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert pattern in lines[0], lines[0]
    assert not (tmp_path / "results").exists()


def test_dry_run_prints_the_design_generators_and_aliases(capsys, tmp_path):
    factors = ("temporal_attention,spatial_attention,use_scalars,gradient_checkpointing,"
               "channels_last,pin_memory,resolve_conflicts")
    code, out, _ = in_process(capsys, "--design", "factorial", "--factors", factors, "--seeds",
                              "2", "--dry-run", "--storage", str(tmp_path))
    assert code == 0
    assert "Design: 2^(7-3) fractional factorial, resolution IV, 16 cells" in out
    assert ("Generators: E = ABC, F = BCD, G = ACD; defining relation: I = ABCE = ABFG = "
            "ACDG = ADEF = BCDF = BDEG = CEFG") in out
    assert "A:B = C:E = F:G" in out
    assert "A temporal_attention (true -> false)" in out
    assert "D gradient_checkpointing (false -> true)" in out
    assert "32 trials." in out
    code, out, _ = in_process(capsys, "--design", "factorial", "--factors", FACTORS,
                              "--dry-run", "--storage", str(tmp_path))
    assert code == 0 and "Design: 2^3 full factorial, 8 cells" in out and "24 trials." in out
    assert "no_temporal_attention-no_spatial_attention-no_scalars-seed2" in out
    assert "Generators" not in out


def test_planning_gives_the_factorial_design_and_paired_cells():
    from ablations.experiment.prepare import prepare
    from ablations.experiment.core.request import Request
    from ablations.experiment.designs.factorial import Factorial

    from ablations.experiment.core.design_options import Factorial as FactorialOptions

    prepared = prepare(Request(design=FactorialOptions(
        factors=["temporal_attention", "spatial_attention"]), seeds=[0, 1, 2]))
    assert isinstance(prepared.design, Factorial)
    cells = {spec.variant: spec for spec in prepared.trials}
    assert set(cells) == {"baseline", "no_temporal_attention", "no_spatial_attention",
                          "no_temporal_attention-no_spatial_attention"}
    assert {spec.seed for spec in prepared.trials} == {0, 1, 2}
    both = cells["no_temporal_attention-no_spatial_attention"].config
    assert not both.model.temporal_attention and not both.model.spatial_attention
    assert cells["baseline"].config.model.temporal_attention
    metadata: dict = {}
    prepared.design.record(metadata)
    assert metadata["factorial"]["label"] == "2^2 full factorial"
    assert metadata["factorial"]["factors"] == ["temporal_attention", "spatial_attention"]


# ------------------------------------------------------------------------------ a real run


@pytest.mark.slow
def test_factorial_run_on_ray_prints_and_records_its_effects(tmp_path):
    """The command line end to end with tiny trials: a 2^2 design over the two attention
    switches at 2 seeds; the summary's factorial section, experiment.json's design, the
    report's section and interaction plot."""
    storage = tmp_path / "results"
    proc = run_here(
        "--design", "factorial", "--factors", "temporal_attention,spatial_attention",
        "--seeds", "2", "--epochs", "1", "--set", "synthetic_train=64", "--set",
        "synthetic_val=16", "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16",
        "--set", "embed_dim=16", "--set", "num_heads=2", "--set", "batch_size=16", "--name",
        "fx", "--storage", str(storage), "--no-dashboard", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "8 trials (4 cells of a 2^2 full factorial x 2 seeds)" in out
    assert "Factorial effects (A temporal_attention (true -> false), B spatial_attention" in out
    effects = [line.split() for line in out.splitlines()
               if line.split()[:1] in (["A"], ["B"], ["A:B"])]
    assert [row[0] for row in effects] == ["A", "B", "A:B"]
    assert all(row[-2] in ("worse", "better", "equivalent", "negligible", "inconclusive")
               for row in effects)
    folder = storage / "fx"
    record = json.loads((folder / "experiment.json").read_text())["factorial"]
    assert record["label"] == "2^2 full factorial" and record["generators"] == []
    assert set(record["cells"]) == {"baseline", "no_temporal_attention", "no_spatial_attention",
                                    "no_temporal_attention-no_spatial_attention"}
    trials = pd.read_parquet(folder / "trials.parquet")
    assert len(trials) == 8 and (trials["status"] == "ok").all()
    assert sorted(trials["seed"].unique()) == [0, 1]
    # the design's own table, as Results.tables["effects"] holds it: the printed effects
    from ablations.experiment.designs.records import design_from_record
    from ablations.config.comparison import Decision
    from ablations.results.stats.decisions import decision_of

    meta = json.loads((folder / "experiment.json").read_text())
    tables = design_from_record(meta, str(folder)).tables(
        trials, meta, decision_of(meta, Decision(reference="baseline")))
    assert list(tables) == ["effects"] and len(tables["effects"]) == 3
    assert tables["effects"]["verdict"].tolist() == [row[-2] for row in effects]
    report = run_here("report", str(folder), "--figures", "png")
    assert report.returncode == 0, report.stderr[-3000:]
    text = (folder / "report.md").read_text()
    assert "## Factorial effects" in text and "report_files/interactions.png" in text
    assert (folder / "report_files" / "interactions.png").stat().st_size > 0
