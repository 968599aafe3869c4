"""The ablation table for a paper (`report --format latex|markdown|csv`, results/report/paper.py):
its numbers are the trials', the reference comes first, the best arm and those not
distinguishable from it are bold, the verdicts are marked and explained in the caption, and
the LaTeX compiles with a real engine (pdflatex, booktabs)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ablations.results.io.files import write_parquet_atomic
from ablations.results.report.build import write_report
from ablations.results.report.paper import not_distinguishable
from tests.test_analysis import _experiment

MAIN_JOB = Path(__file__).with_name("fixtures") / "main_job"  # its README says from where


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The analysis tests' experiment with one arm more, clearly worse than the others."""
    root = _experiment(tmp_path_factory.mktemp("paper") / "exp")
    trials = pd.read_parquet(root / "trials.parquet")
    worse = trials[trials["ablation"] == "baseline"].assign(
        ablation="no_big", trial_name=lambda f: "no_big-" + f["seed"].astype(str),
        test_mae=lambda f: f["test_mae"] + 2.0)
    write_parquet_atomic(pd.concat([trials, worse], ignore_index=True)
                         .assign(data_source="synthetic:0123"), root / "trials.parquet")
    report = write_report(root, formats=("latex", "markdown", "csv"), figures="png")
    return root, report


def test_the_csv_holds_the_trials_means_with_the_reference_first(written):
    root, report = written
    table = pd.read_csv(io.StringIO(report.tables["csv"].read_text()))
    trials = pd.read_parquet(root / "trials.parquet")
    ok = trials[trials["status"] == "ok"]
    metric = report.ablation.attrs["metric"]
    assert table["variant"].iloc[0] == report.ablation.attrs["reference"]
    for _, row in table.iterrows():
        expected = ok.loc[ok["ablation"] == row["variant"], metric].mean()
        assert row["mean"] == pytest.approx(expected)
    assert set(table["verdict"]) <= {"reference", "worse", "better", "equivalent",
                                     "negligible", "inconclusive", "significant"}


def test_the_latex_table_has_booktabs_rules_escaped_names_bold_and_a_caption(written):
    root, report = written
    latex = report.tables["latex"].read_text()
    assert all(rule in latex for rule in (r"\toprule", r"\midrule", r"\bottomrule"))
    assert r"\caption{" in latex and r"t interval, " in latex and "Holm over" in latex
    # the difference test the verdicts got, as experiment.json records it
    assert f"{report.ablation.attrs['verdict_test']} test and TOST" in latex
    assert "no\\_x" in latex and " no_x " not in latex  # an underscore is escaped
    csv = pd.read_csv(io.StringIO(report.tables["csv"].read_text())).set_index("variant")
    metric = report.ablation.attrs["metric"]
    trials = pd.read_parquet(root / "trials.parquet")
    bold = not_distinguishable(trials, metric=metric, direction=-1,
                               alpha=report.ablation.attrs["alpha"])
    for variant in csv.index:
        line = next(line for line in latex.splitlines()
                    if line.startswith(variant.replace("_", r"\_") + " &"))
        assert (r"\bfseries" in line) == (variant in bold), line
    assert "baseline" in bold and "no_big" not in bold
    for verdict, marker in (("worse", r"$\dagger$"), ("better", r"$\ddagger$")):
        if (csv["verdict"] == verdict).any():
            assert f"{marker} {verdict}" in latex


def test_every_verdict_is_marked_and_delta_is_the_interval_the_test_reads(written):
    _, report = written
    markdown = report.tables["markdown"].read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| no_x |"))
    # a 5% margin is tested on the ratio: Fieller's 90% interval of the mean's ratio − 1
    assert "| Δ vs baseline (%) |" in markdown and "| +20.0 [+3.8, +31.5] | ? |" in row
    latex = report.tables["latex"].read_text()
    assert "; ? inconclusive." in latex
    # what would decide it: the margin its data support
    bound = 100 * report.ablation.set_index("ablation").loc["no_x", "equivalence_bound_holm"]
    assert rf"The ? rows would be equivalent at a margin of $\pm${bound:.1f}\%." in latex
    assert r"- 1 (\%), with Fieller's 90\% interval the equivalence test reads" in latex


def test_arms_with_different_seed_counts_each_show_theirs(written):
    from ablations.results.report.paper import paper_table
    from ablations.results.stats.verdicts import verdict_table

    root, _ = written
    trials = pd.read_parquet(root / "trials.parquet")
    trials.loc[(trials["ablation"] == "no_x") & (trials["seed"] == 0), "status"] = "failed"
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin="5%")
    markdown = paper_table(table, trials, "markdown")
    assert markdown.splitlines()[0].startswith("| Variant | n | test_mae")
    counts = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in markdown.splitlines()[2:]}
    ok = trials[trials["status"] == "ok"].groupby("ablation").size().astype(str).to_dict()
    assert counts == ok and ok["no_x"] != ok["baseline"]
    # no_x's Δ rests on the seeds both finished, fewer than the baseline's mean: said so
    latex = paper_table(table, trials, "latex")
    pairs = int(table.set_index("ablation").loc["no_x", "n_pairs"])
    assert (f"finished: {pairs} for no\\_x (means over {ok['no_x']} and {ok['baseline']})"
            in latex), latex
    ok_rows = pd.read_parquet(root / "trials.parquet").query("status == 'ok'")
    common = set.intersection(*(set(group["seed"]) for _, group in ok_rows.groupby("ablation")))
    equal = ok_rows[ok_rows["seed"].isin(common)]
    same = paper_table(verdict_table(equal, reference="baseline", metric="test_mae",
                                     margin="5%"), equal, "markdown")
    assert "| n |" not in same  # one count for all: the caption says it
    assert "finished:" not in paper_table(verdict_table(
        equal, reference="baseline", metric="test_mae", margin="5%"), equal, "latex")


def test_the_best_arm_and_those_not_distinguishable_from_it_are_bold():
    rows = [{"ablation": arm, "seed": seed, "status": "ok", "m": value + 0.01 * seed}
            for arm, value in (("a", 1.0), ("b", 1.001), ("c", 3.0)) for seed in range(4)]
    trials = pd.DataFrame(rows)
    trials.loc[(trials["ablation"] == "b") & (trials["seed"] == 2), "m"] += 0.02
    assert not_distinguishable(trials, metric="m", direction=-1, alpha=0.05) == {"a", "b"}
    assert not_distinguishable(trials, metric="m", direction=1, alpha=0.05) == {"c"}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="needs pdflatex (apt-get install texlive-latex-recommended)")
def test_the_latex_table_compiles_with_pdflatex(written, tmp_path):
    from ablations.results.report.paper import effects_paper_table

    _, report = written
    compile_paper(tmp_path, {"table.tex": report.tables["latex"].read_text(),
                             "effects.tex": effects_paper_table(_effects(), "latex")})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="needs pdflatex (apt-get install texlive-latex-recommended)")
def test_the_column_table_fits_a_two_column_paper_and_the_wide_one_its_page(written, tmp_path):
    """Nine variants with the main job's long names: the column form within the column (no
    overfull box above 1 pt), the page form across the page; the page form in a column
    would not fit (what the column form is for)."""
    from ablations.results.report.paper import paper_table
    from ablations.results.stats.verdicts import verdict_table

    root, _ = written
    trials = pd.read_parquet(root / "trials.parquet")
    base = trials[trials["ablation"] == "baseline"]
    arms = ["no_temporal_attention", "no_spatial_attention", "no_attention", "no_scalars",
            "no_images", "single_frame", "reduced_width", "point_estimate"]
    trials = pd.concat([base, *(base.assign(ablation=arm, test_mae=base["test_mae"] * (1.3 + i))
                                for i, arm in enumerate(arms))], ignore_index=True)
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin="5%")

    def overfull(body: str) -> list[float]:
        (tmp_path / "t.tex").write_text(body)
        (tmp_path / "p.tex").write_text(
            "\\documentclass[twocolumn]{article}\n\\usepackage{booktabs,graphicx}\n"
            "\\begin{document}\n\\input{t.tex}\nText.\n\\end{document}\n")
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                               "p.tex"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout[-2000:]
        return [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide",
                                             (tmp_path / "p.log").read_text())]

    assert max(overfull(paper_table(table, trials, "latex")), default=0.0) <= 1.0
    assert max(overfull(paper_table(table, trials, "latex", width="page")), default=0.0) <= 1.0
    squeezed = paper_table(table, trials, "latex", width="page").replace("table*", "table")
    assert max(overfull(squeezed), default=0.0) > 1.0
    # an arm that diverged: every arm's diverged runs and failure bound, still in the column
    first = (trials["ablation"] == arms[-1]) & (trials["seed"] == trials["seed"].min())
    trials.loc[first, ["status", "test_mae"]] = ["diverged", float("nan")]
    flaky = paper_table(verdict_table(trials, reference="baseline", metric="test_mae",
                                      margin="5%"), trials, "latex")
    runs = int((trials["ablation"] == "baseline").sum())
    assert f"& 1/{runs} ($\\leq$" in flaky and "Clopper-Pearson" in flaky
    assert max(overfull(flaky), default=0.0) <= 1.0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("bibtex") is None,
                    reason="needs pdflatex and bibtex (apt-get install texlive-latex-base)")
def test_a_two_column_paper_takes_the_main_jobs_table_figures_and_methods_as_written(
        tmp_path):
    """The main job's report (its recorded results, tests/fixtures/main_job): the column table,
    the column figures and the methods paragraph with its references in a two-column article:
    pdflatex and bibtex run clean, no box overfull by more than 1 pt, every citation resolved,
    and no Type 3 (bitmap) font in the PDF."""
    root = tmp_path / "components"
    shutil.copytree(MAIN_JOB, root)
    report = write_report(root, formats=("latex",))
    assert len(pd.read_parquet(root / "trials.parquet")) == 27
    latex = report.tables["latex"].read_text()
    for variant in report.ablation["ablation"]:
        assert variant.replace("_", "\\_") in latex
    tmp_path = tmp_path / "paper"
    tmp_path.mkdir()
    for name in ("table.tex", "methods.tex", "references.bib"):
        (tmp_path / name).write_text((root / name).read_text())
    figures = ["forest-column.pdf", "learning_curves-column.pdf"]
    for name in figures:
        (tmp_path / name).write_bytes((root / "report_files" / name).read_bytes())
    body = "\n".join(f"\\begin{{figure}}\\centering\\includegraphics[width=\\columnwidth]"
                     f"{{{name}}}\\caption{{{name[:-4].replace('_', ' ')}}}\\end{{figure}}"
                     for name in figures)
    (tmp_path / "paper.tex").write_text(
        "\\pdfcompresslevel=0\\pdfobjcompresslevel=0\n"  # the PDF's fonts readable below
        "\\documentclass[twocolumn]{article}\n\\usepackage{booktabs,graphicx}\n"
        "\\begin{document}\n\\input{table.tex}\n" + body + "\n\\input{methods.tex}\n"
        "\\bibliographystyle{plain}\n\\bibliography{references}\n\\end{document}\n")
    compile_with_bibtex(tmp_path)
    log = (tmp_path / "paper.log").read_text()
    overfull = [float(x) for x in re.findall(r"Overfull \\[hv]box \(([\d.]+)pt too", log)]
    assert max(overfull, default=0.0) <= 1.0, overfull
    assert "Citation" not in log and "undefined" not in log
    assert b"/Type3" not in (tmp_path / "paper.pdf").read_bytes()
    if shutil.which("pdffonts"):  # poppler's list of the PDF's fonts, where installed
        fonts = subprocess.run(["pdffonts", "paper.pdf"], cwd=tmp_path, capture_output=True,
                               text=True, check=True).stdout
        assert "Type 3" not in fonts and "Type 1" in fonts, fonts


def compile_with_bibtex(folder) -> None:
    """paper.tex in ``folder`` through pdflatex, bibtex and pdflatex twice, each clean."""
    for program in (["pdflatex"], ["bibtex"], ["pdflatex"], ["pdflatex"]):
        done = subprocess.run([*program, *(["-interaction=nonstopmode", "-halt-on-error"]
                                           if program == ["pdflatex"] else []), "paper"],
                              cwd=folder, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:]


def compile_paper(folder, inputs: dict[str, str]) -> None:
    """An article that inputs each file of ``inputs`` (name -> LaTeX), compiled by pdflatex
    in ``folder``: it must end with a PDF and no error."""
    for name, text in inputs.items():
        (folder / name).write_text(text)
    body = "\n\n".join(f"\\input{{{name}}}" for name in inputs)
    (folder / "paper.tex").write_text(
        "\\documentclass{article}\n\\usepackage{booktabs,graphicx}\n\\begin{document}\n"
        f"{body}\n\\end{{document}}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           "paper.tex"], cwd=folder, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (folder / "paper.pdf").read_bytes().startswith(b"%PDF")
    assert not re.search(r"^! ", done.stdout, flags=re.M)


def test_the_methods_paragraph_states_the_design_the_run_recorded(written):
    root, report = written
    text = (root / "methods.md").read_text()
    attrs = report.ablation.attrs
    seeds = sorted(pd.read_parquet(root / "trials.parquet")["seed"].unique())
    assert f"over {len(seeds)} seeds" in text or f"to {len(seeds)} seeds" in text
    assert f"on {attrs['metric']}" in text and f"α = {attrs['alpha']:g}" in text
    assert "Holm" in text and "Schuirmann 1987" in text and "paired by seed" in text
    assert "The data: the runner's synthetic set." in text
    latex = (root / "methods.tex").read_text()
    assert r"\cite{holm1979}" in latex and "α" not in latex
    bib = (root / "references.bib").read_text()
    for key in ("ablationrunner", "schuirmann1987", "holm1979", "lan1983", "kim1987",
                "bouthillier2021"):
        assert f"{{{key}," in bib
    assert "of the built-in multimodal model with ablation-runner 0.1.0" in text
    assert "A trial's seed set the weights' initialisation" in text and "PyTorch " in text


def test_the_runner_is_cited_with_the_version_it_is_released_as():
    import tomllib

    import yaml

    from ablations.results.report.methods import REFERENCES_BIB, RUNNER_VERSION

    repo = Path(__file__).resolve().parents[1]
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    cited = yaml.safe_load((repo / "CITATION.cff").read_text())["version"]
    assert RUNNER_VERSION == project == cited
    assert f"note = {{Software, version {RUNNER_VERSION}}}" in REFERENCES_BIB


def test_a_programs_methods_name_it_and_leave_what_the_runner_cannot_know_to_the_author(
        written):
    import json

    from ablations.results.report.methods import methods_text
    from ablations.results.stats.verdicts import verdict_table

    root, _ = written
    run = "{python} examples/digits/train.py --lr {lr} --seed {init_seed} --data {data_seed}"
    trials = pd.read_parquet(root / "trials.parquet").assign(
        model="command:" + json.dumps({"config": {"lr": 0.1}, "metrics": {}, "run": run}))
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin="5%")
    text = methods_text({"space": "digits", "ray_version": "2.60.0",
                         "torch_version": "2.13.0+cpu"}, trials, table)
    assert "variants of the program `examples/digits/train.py` with ablation-runner" in text
    assert ("A trial's seeds were passed to the code (on its command line as {init_seed}, "
            "{data_seed}); [author: say what each seed sets in your code") in text
    assert "with Ray 2.60.0; [author: name the program's own libraries and versions]" in text
    assert "PyTorch" not in text and "initialisation and dropout" not in text
    plugin = methods_text({"space": "conv3d"}, trials.assign(model="examples.conv3d:PLUGIN"),
                          table)  # a model plugin runs the built-in loop: its seeds are known
    assert "A trial's seed set the weights' initialisation" in plugin and "[author" not in plugin


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("bibtex") is None,
                    reason="needs pdflatex and bibtex (apt-get install texlive-latex-base)")
def test_the_methods_paragraph_compiles_with_its_references(written, tmp_path):
    root, _ = written
    for name in ("methods.tex", "references.bib"):
        (tmp_path / name).write_text((root / name).read_text())
    (tmp_path / "paper.tex").write_text(
        "\\documentclass{article}\n\\begin{document}\n\\input{methods.tex}\n"
        "\\bibliographystyle{plain}\n\\bibliography{references}\n\\end{document}\n")
    compile_with_bibtex(tmp_path)
    assert "Citation" not in (tmp_path / "paper.log").read_text()  # every key resolved
    assert "Warning--" not in (tmp_path / "paper.blg").read_text()  # every entry complete
    assert "Holm" in (tmp_path / "paper.bbl").read_text()


def _effects():
    """A 2x2 design whose cells interact: each switch alone changes nothing, both add 1."""
    from ablations.results.stats.factorial import factorial_effects
    from ablations.results.stats.factorial_design import FactorialDesign

    design = FactorialDesign.plan(["use_a", "use_b"], [True, True])
    rows = []
    for cell, name in enumerate(design.cells):
        both = not any(design.cell_overrides(cell).get(k, True) for k in ("use_a", "use_b"))
        for seed in range(4):
            rows.append({"ablation": name, "seed": seed, "status": "ok",
                         "test_mae": 1.0 + (1.0 if both else 0.0) + 0.01 * seed
                         + 0.002 * (cell % 2)})
    return factorial_effects(pd.DataFrame(rows), design, metric="test_mae", margin="5%")


def test_the_factorial_and_tuned_tables_for_a_paper():
    from ablations.results.report.paper import effects_paper_table, tuned_paper_table
    from ablations.results.stats.tuned import side_by_side
    from tests.test_tuned import _phase_rows

    effects = _effects()
    latex = effects_paper_table(effects, "latex")
    interaction = next(line for line in latex.splitlines() if line.startswith("A:B"))
    assert r"\dag" in interaction and r"\toprule" in latex  # worse: MAE up by 1
    assert "use\\_a x use\\_b" in interaction
    assert pd.read_csv(io.StringIO(effects_paper_table(effects, "csv")))["estimate"].iloc[-1] \
        == pytest.approx(1.0, abs=0.01)
    base = [1.0 + 0.01 * s for s in range(6)]
    trials = pd.concat([_phase_rows("evaluation", "baseline", base),
                        _phase_rows("evaluation", "slow", [b * 1.3 for b in base]),
                        _phase_rows("tuned", "baseline", base),
                        _phase_rows("tuned", "slow", [b * 1.001 for b in base])])
    tuned = tuned_paper_table(side_by_side(trials, keys=["lr"], margin="5%"), "latex")
    slow = next(line for line in tuned.splitlines() if line.startswith("slow"))
    # worse at the given configuration, within the margin at its own best
    assert r"\dag" in slow and (r"$\approx$" in slow or r"$\sim$" in slow) and "0.0005" in slow


def test_the_methods_of_a_factorial_and_a_tuned_run_state_their_own_designs():
    """A factorial run's methods name its design and how the effects were estimated and
    tested; a tuned run's, the equal budget, the sampler and how the tuned arms were
    compared; both cite what they name."""
    from ablations.results.report.methods import REFERENCES_BIB, methods_text
    from ablations.results.stats.factorial_design import FactorialDesign
    from ablations.results.stats.verdicts import verdict_table
    from tests.test_tuned import _phase_rows

    design = FactorialDesign.plan(["use_a", "use_b", "use_c"], [True, True, True])
    rows = pd.DataFrame([{"ablation": name, "seed": seed, "status": "ok",
                          "trial_name": f"{name}-{seed}", "test_mae": 1.0 + 0.01 * seed}
                         for name in design.cells for seed in range(3)])
    table = verdict_table(rows, reference=design.cells[0], metric="test_mae", margin="5%")
    text = methods_text({"factorial": design.to_dict()}, rows, table)
    assert ("the 8 cells of a two-level design (2^3 full factorial) in 3 switches (use_a, "
            "use_b, use_c)") in text
    assert "one ordinary least-squares fit of every cell at every seed" in text
    assert "alias" not in text  # a full factorial has no aliases
    base = [1.0 + 0.01 * s for s in range(4)]
    trials = pd.concat([_phase_rows("evaluation", "baseline", base),
                        _phase_rows("evaluation", "slow", [b * 1.3 for b in base])])
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin="5%")
    meta = {"tuned": {"keys": ["lr", "weight_decay"], "budget": 8, "startup_trials": 4,
                      "metric": "val_mae"}}
    text = methods_text(meta, trials, table)
    assert ("tuned with the same budget: 8 trials of Optuna's TPE sampler (Akiba et al. 2019) "
            "through Ray Tune per arm, the first 4 of them at random, over lr, "
            "weight_decay") in text and "chosen on val_mae" in text
    assert r"\cite{akiba2019}" in methods_text(meta, trials, table, "latex")
    assert "{akiba2019," in REFERENCES_BIB and "{demsar2006," in REFERENCES_BIB


def test_the_across_dataset_table_and_methods_for_a_paper():
    """Across datasets: the table for a paper holds each ablation's pooled ratio with the
    interval the equivalence test reads and its verdict's marker; the methods paragraph
    says the design ran on each dataset and how the datasets were pooled."""
    from ablations.results.report.methods import methods_text
    from ablations.results.report.paper import across_paper_table
    from ablations.results.stats.decisions import (
        across_datasets_of,
        dataset_verdicts_of,
        one_below_the_other,
    )
    from tests.test_datasets_stats import SETTINGS, planted

    trials = planted({"no_dropout": [1.3, 1.25, 1.35], "no_norm": [1.0, 1.0, 1.0]}, seeds=3,
                     spread=0.03)
    verdicts = one_below_the_other(dataset_verdicts_of(trials, {}, **SETTINGS))
    across = across_datasets_of(trials, {}, None, **SETTINGS)
    latex = across_paper_table(across, "latex")
    worse = next(line for line in latex.splitlines() if line.startswith("no\\_dropout"))
    row = across.set_index("ablation").loc["no_dropout"]
    assert f"{100 * row['ratio']:+.1f} [{100 * row['tost_ci_low']:+.1f}, " in worse
    assert r"$\dagger$" in worse and "3/3" in worse
    assert r"\resizebox" in latex and "t on k - 1 degrees of freedom" in latex
    assert "table*" in across_paper_table(across, "latex", width="page")
    csv = pd.read_csv(io.StringIO(across_paper_table(across, "csv")))
    assert list(csv["ablation"]) == list(across["ablation"])
    text = methods_text({}, trials, verdicts)
    names = ", ".join(across.attrs["datasets"])
    assert f"made on each of the 3 datasets ({names}) separately" in text
    assert "each over 3 seeds on each dataset" in text
    assert "±5% of the reference's mean on each dataset, tested as a ratio" in text
    assert "neither equivalent nor better across them" in text
    assert "tested with t on k − 1 degrees of freedom" in text


ODD = " % $ # _ { } ~ ^ \\ & μ"  # each of LaTeX's special characters, and a symbol


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="needs pdflatex (apt-get install texlive-latex-recommended)")
def test_names_and_a_unit_with_latex_specials_compile_as_written(written, tmp_path):
    """Variant names (the reference's too) and a metric unit holding every special character
    of LaTeX: the table and the methods paragraph compile, and the PDF's text shows them."""
    from ablations.config.metrics import Metric
    from ablations.results.report.methods import methods_text
    from ablations.results.report.paper import paper_table
    from ablations.results.stats.verdicts import verdict_table

    root, _ = written
    trials = pd.read_parquet(root / "trials.parquet")
    trials = trials.assign(ablation=trials["ablation"] + ODD)
    metric = Metric("test_mae", "lower", "km" + ODD)
    table = verdict_table(trials, reference="baseline" + ODD, metric=metric, margin="5%")
    meta = {"space": "odd", "metrics": {"test_mae": metric.record()}}
    compile_paper(tmp_path, {"methods.tex": methods_text(meta, trials, table, "latex"),
                             "table.tex": paper_table(table, trials, "latex")})
    table_tex = (tmp_path / "table.tex").read_text()
    assert r"baseline \% \$ \# \_ \{ \} \textasciitilde{} \textasciicircum{} " \
        r"\textbackslash{} \& $\mu$" in table_tex
