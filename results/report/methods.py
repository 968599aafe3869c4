"""A methods paragraph for a paper, from what the experiment recorded: what was run (the
model or code, the data, epochs, seeds and their sources, hardware, versions) and how the
verdicts were reached (pairing, tests, the margin and when it was fixed, α, Holm, the
sequential design and its looks, the robustness and baseline checks), in Markdown and in
LaTeX with ``\\cite`` keys of :data:`REFERENCES_BIB`."""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable, Literal, Optional

import pandas as pd

from ablations.results.io.directions import metric_of
from ablations.results.report.formatting import tex
from ablations.results.stats.analyses import Analysis, analysis_of
from ablations.results.stats.dataset_rows import DATASET, is_across_datasets
from ablations.results.stats.shared_variance import SHARED_TEST
from ablations.results.stats.verdicts import margin_text

Style = Literal["markdown", "latex"]

RUNNER_VERSION = "0.1.0"  # pyproject.toml's and CITATION.cff's (tests/test_methods.py)
AUTHOR_NOTE = "[author: {}]"  # what the runner cannot know, left to the paper's author

# @misc: BibTeX's standard styles (plain, ...) know no @software
REFERENCES_BIB = r"""@misc{ablationrunner,
  author = {{The ablation-runner contributors}},
  title = {ablation-runner: ablations on {Ray Tune} with paired seeds, verdicts and
           sequential seeds},
  note = {Software, version """ + RUNNER_VERSION + r"""}, year = {2026}}

@article{schuirmann1987,
  author = {Schuirmann, Donald J.},
  title = {A comparison of the two one-sided tests procedure and the power approach for
           assessing the equivalence of average bioavailability},
  journal = {Journal of Pharmacokinetics and Biopharmaceutics},
  volume = {15}, number = {6}, pages = {657--680}, year = {1987}}

@article{holm1979,
  author = {Holm, Sture},
  title = {A simple sequentially rejective multiple test procedure},
  journal = {Scandinavian Journal of Statistics},
  volume = {6}, number = {2}, pages = {65--70}, year = {1979}}

@article{lan1983,
  author = {Lan, K. K. Gordon and DeMets, David L.},
  title = {Discrete sequential boundaries for clinical trials},
  journal = {Biometrika},
  volume = {70}, number = {3}, pages = {659--663}, year = {1983}}

@article{kim1987,
  author = {Kim, Kyungmann and DeMets, David L.},
  title = {Design and analysis of group sequential tests based on the type {I} error
           spending rate function},
  journal = {Biometrika},
  volume = {74}, number = {1}, pages = {149--154}, year = {1987}}

@inproceedings{akiba2019,
  author = {Akiba, Takuya and Sano, Shotaro and Yanase, Toshihiko and Ohta, Takeru and
            Koyama, Masanori},
  title = {Optuna: A next-generation hyperparameter optimization framework},
  booktitle = {Proceedings of the 25th {ACM} {SIGKDD} International Conference on Knowledge
               Discovery \& Data Mining},
  pages = {2623--2631}, year = {2019}}

@article{demsar2006,
  author = {Dem{\v{s}}ar, Janez},
  title = {Statistical comparisons of classifiers over multiple data sets},
  journal = {Journal of Machine Learning Research},
  volume = {7}, pages = {1--30}, year = {2006}}

@inproceedings{bouthillier2021,
  author = {Bouthillier, Xavier and Delaunay, Pierre and Bronzi, Mirko and Trofimov, Assya
            and Nichyporuk, Brennan and Szeto, Justin and Mohammadi Sepahvand, Nazanin and
            Raff, Edward and Madan, Kanika and Voleti, Vikram and Ebrahimi Kahou, Samira and
            Michalski, Vincent and Arbel, Tal and Pal, Chris and Varoquaux, Ga{\"e}l and
            Vincent, Pascal},
  title = {Accounting for variance in machine learning benchmarks},
  booktitle = {Proceedings of Machine Learning and Systems},
  volume = {3}, pages = {747--769}, year = {2021}}

@article{satterthwaite1946,
  author = {Satterthwaite, F. E.},
  title = {An approximate distribution of estimates of variance components},
  journal = {Biometrics Bulletin},
  volume = {2}, number = {6}, pages = {110--114}, year = {1946}}

@article{clopper1934,
  author = {Clopper, C. J. and Pearson, E. S.},
  title = {The use of confidence or fiducial limits illustrated in the case of the binomial},
  journal = {Biometrika},
  volume = {26}, number = {4}, pages = {404--413}, year = {1934}}
"""
# key -> how the Markdown cites it
CITED = {"ablationrunner": "The ablation-runner contributors 2026",
         "schuirmann1987": "Schuirmann 1987", "holm1979": "Holm 1979",
         "lan1983": "Lan and DeMets 1983", "kim1987": "Kim and DeMets 1987",
         "akiba2019": "Akiba et al. 2019", "demsar2006": "Demšar 2006",
         "bouthillier2021": "Bouthillier et al. 2021", "clopper1934": "Clopper and Pearson 1934",
         "satterthwaite1946": "Satterthwaite 1946"}
SOURCES = {"init": "the weights' initialisation and dropout", "order": "the order of the "
           "training samples", "data": "the draw of the data and its split"}


def methods_text(meta: dict[str, Any], trials: pd.DataFrame, verdicts: pd.DataFrame,
                 style: Style = "markdown", baseline_line: Optional[str] = None) -> str:
    """The paragraph for the experiment ``meta`` (its experiment.json), ``trials`` (its
    evaluation rows) and ``verdicts`` (:func:`ablations.results.stats.decisions.verdicts_of`);
    the metric's direction and unit are those ``meta`` declares (own code), else the built-in
    model's."""
    latex = style == "latex"
    cite = _citer(latex)
    reference = verdicts.attrs["reference"]
    # the design's sentences and its settings fixed before (on each dataset, where several)
    analysis = analysis_of(meta, trials)
    parts = [_run_sentences(meta, trials, reference, cite),
             _comparison_sentences(meta, trials, verdicts, analysis, cite)]
    grown = grown_sentence(meta.get("grown") or [], reference, analysis.recorded_settings())
    if grown:
        parts.append(grown)
    parts += analysis.methods_sentences(cite)
    parts += _robustness_sentences(verdicts, cite, baseline_line)
    text = " ".join(parts)
    return _tex(text) if latex else text


def _citer(latex: bool) -> Callable[..., str]:
    """How the text cites keys of :data:`REFERENCES_BIB`: ``~\\cite{...}`` in LaTeX, the
    authors and year (:data:`CITED`) in Markdown."""
    def cite(*keys: str) -> str:
        return (r"~\cite{" + ",".join(keys) + "}") if latex else \
            " (" + "; ".join(CITED[key] for key in keys) + ")"

    return cite


def _run_sentences(meta: dict[str, Any], trials: pd.DataFrame, reference: str,
                   cite: Callable[..., str]) -> str:
    """What was run: the variants and their seeds, what the seeds set, the data, the epochs,
    the hardware and software, and the trials that diverged or failed."""
    first = trials.iloc[0]
    model = str(first.get("model") or "") if "model" in trials else ""
    run = _command_run(model)
    code = ("the built-in multimodal model" if not model else
            f"the program `{_program(run)}`" if run is not None else f"the code `{model}`")
    epochs = first.get("epochs")
    device = first.get("device_name") or first.get("device_used") or "CPU"
    return (f"{_variants_sentence(trials, code, reference, cite)} "
            f"{_seeding(meta, run, str(first.get('seed_sources', 'init,order,data')))}"
            f"{cite('bouthillier2021')}."
            + f" The data: {_data(trials)}."
            + (f" Each trial trained {int(epochs)} epochs." if pd.notna(epochs) and epochs
               else "")
            + f" Trials ran on {device} ({meta.get('cpus_per_trial', 1):g} CPU"
            + (f" and {meta['gpus_per_trial']:g} GPU" if meta.get("gpus_per_trial") else "")
            + f" per trial) with {_software(meta, run)}."
            + _outcomes(trials))


def _variants_sentence(trials: pd.DataFrame, code: str, reference: str,
                       cite: Callable[..., str]) -> str:
    """The variants of ``code`` and the seeds each ran (on each dataset, where several)."""
    variants = list(dict.fromkeys(trials["ablation"].astype(str)))
    seeds = sorted(set(trials["seed"].astype(int)))
    several = is_across_datasets(trials)
    # seeds per variant: on each dataset where there are several
    per_variant = trials[trials["status"] == "ok"].groupby(
        [DATASET, "ablation"] if several else "ablation").size()
    counts = sorted(set(per_variant.astype(int)))
    spread = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return (f"We ran {len(variants)} variants of {code} with ablation-runner {RUNNER_VERSION}"
            f"{cite('ablationrunner')} (the reference, {reference}, and "
            f"{len(variants) - 1} ablations), each over {spread} seeds"
            f"{' on each dataset' if several else ''} "
            f"({_seed_list(seeds)}), every variant's from the same list, so each comparison is "
            f"paired by seed.")


def _seeding(meta: dict[str, Any], run: Optional[str], sources: str) -> str:
    """What a trial's seeds set: the sources ``sources`` names for the built-in loop (a model
    plugin's too); for own code, how the runner passed them, what they set left to the
    author."""
    if run is not None or bool(meta.get("metrics")):  # a model plugin runs the built-in loop
        return (f"A trial's seeds were passed to the code ({_passed(run, sources)}); "
                + AUTHOR_NOTE.format("say what each seed sets in your code, e.g. the "
                                     "initialisation and the order of the samples"))
    varied = [SOURCES[s] for s in sources.split(",") if s in SOURCES]
    return ("A trial's seed set "
            + (", ".join(varied[:-1]) + " and " + varied[-1] if len(varied) > 1 else
               varied[0] if varied else "nothing"))


def _software(meta: dict[str, Any], run: Optional[str]) -> str:
    """The versions the trials ran with; a program's own libraries left to the author."""
    if run is not None:
        return (f"Ray {meta.get('ray_version', '?')}; "
                + AUTHOR_NOTE.format("name the program's own libraries and versions"))
    return f"PyTorch {meta.get('torch_version', '?')} and Ray {meta.get('ray_version', '?')}"


def _outcomes(trials: pd.DataFrame) -> str:
    """The trials that diverged (outcomes) and those that failed (left out), a sentence
    each; "" where there are none."""
    statuses = trials["status"].value_counts()
    diverged, failed = int(statuses.get("diverged", 0)), int(statuses.get("failed", 0))
    return ((f" {diverged} trial{'s' if diverged != 1 else ''} diverged (a non-finite loss or "
             "metric); they count as outcomes, ranked below every finished seed."
             if diverged else "")
            + (f" {failed} trial{'s' if failed != 1 else ''} failed "
               f"({'they are' if failed > 1 else 'it is'} left out)." if failed else ""))


def _comparison_sentences(meta: dict[str, Any], trials: pd.DataFrame, verdicts: pd.DataFrame,
                          analysis: Analysis, cite: Callable[..., str]) -> str:
    """How each variant was compared with the reference: the metric and its direction, the
    tests, the margin and when it was fixed, α and Holm's correction."""
    a = verdicts.attrs
    metric, reference, alpha = a["metric"], a["reference"], a["alpha"]
    variants = list(dict.fromkeys(trials["ablation"].astype(str)))
    several = is_across_datasets(trials)
    measure = metric_of(metric, meta.get("metrics"))
    direction = {1: "higher is better", -1: "lower is better"}.get(measure.sign,
                                                                   "no better direction")
    unit = measure.unit
    return (
        f"We compared each variant with {reference} on {metric}"
        f"{f' ({unit})' if unit else ''} ({direction}): "
        + (f"a two-sided t-test of the seed-paired difference whose run noise is estimated "
           "from every variant of the table (the variants' variant × seed residual mean "
           "square, and the reference's own part apart, with Satterthwaite's degrees of "
           f"freedom{cite('satterthwaite1946')}), each variant's own paired t-test required "
           "at the unadjusted level as well, for a difference (worse or better), and two "
           "one-sided tests of the same statistic for equivalence"
           if analysis.verdict_test == SHARED_TEST else
           "a two-sided paired t-test for a difference (worse or better) and two one-sided "
           "tests for equivalence")
        + f"{cite('schuirmann1987')} within a margin of "
        + (f"±{100 * float(a['margin']):.3g}% of the reference's mean on each dataset, tested as "
           "a ratio" if several and a.get("relative") else margin_text(a, unit))
        + (", fixed before the first trial" if analysis.recorded_settings() else "")
        + f". Each kind of verdict holds its family-wise error rate at α = {alpha:g} over the "
        f"{a.get('comparisons', len(variants) - 1)} comparisons with Holm's step-down "
        f"correction{cite('holm1979')}.")


def _robustness_sentences(verdicts: pd.DataFrame, cite: Callable[..., str],
                          baseline_line: Optional[str]) -> list[str]:
    """What withheld a verdict (an outlying or diverged seed), the bound on the rate of
    divergence and its tolerance, and the reference's baseline check."""
    a = verdicts.attrs
    parts = ["Equivalence was withheld from a variant with an outlying seed or with more "
             "diverged seeds than the reference (a worst-rank test), and a variant with "
             "more diverged seeds than the reference was never called better."]
    bound = failure_sentence(verdicts, a["alpha"], cite)
    if bound:
        parts.append(bound)
    tolerance = a.get("max_failure_rate")
    if tolerance is not None:
        parts.append(f"A variant was called equivalent only where that bound was below "
                     f"{tolerance:.0%}, a tolerance fixed before the first trial.")
    if baseline_line:
        parts.append(f"Before the verdicts, the reference was checked to have learned: "
                     f"{baseline_line.removeprefix('Baseline check: ')}")
    return parts


def grown_sentence(grown: list[dict[str, Any]], reference: str, recorded: bool = True) -> str:
    """How the family of comparisons grew after the first trials (experiment.json's
    ``grown``): the variants it started with and those added, each time; "" if it never
    grew. ``recorded``: the margin and α were recorded before the first trial."""
    if not grown:
        return ""
    before = [v for v in grown[0].get("variants_before", []) if v != reference]
    steps = [f"{_names([str(v) for v in entry.get('added', [])])} "
             f"(on {str(entry.get('at', ''))[:10]})" for entry in grown]
    added = sum(len(entry.get("added", [])) for entry in grown)
    return (f"The family grew after its first trials had finished: the experiment began with "
            f"{len(before)} comparison{'s' if len(before) != 1 else ''} with {reference}, and "
            f"{', then '.join(steps)} {'was' if added == 1 else 'were'} added later at the "
            "same seeds"
            + (", with the margin and α fixed before the first trial" if recorded else "")
            + "; Holm's correction runs over the whole family, so each verdict reads the "
            "table as it stands.")


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def failure_sentence(verdicts: pd.DataFrame, alpha: float, cite: Any) -> str:
    """How rare a divergence the seeds rule out: each arm's one-sided Clopper-Pearson bound on
    its failure rate (the verdict table's ``failure_rate_upper``), as its largest value, or
    the diverged arms' bounds (each with its dataset where there are several)."""
    if "failure_rate_upper" not in verdicts or not verdicts["n_outcomes"].fillna(0).gt(0).any():
        return ""
    rows = verdicts[verdicts["n_outcomes"] > 0]
    level = f"one-sided {1 - alpha:.0%} upper confidence bound{cite('clopper1934')}"
    if not rows["n_diverged"].gt(0).any():
        return (f"No run diverged; with {int(rows['n_outcomes'].min())} or more runs per "
                f"variant, the {level} on each variant's rate of divergence is at most "
                f"{rows['failure_rate_upper'].max():.0%}.")
    # over several datasets each row is one dataset's arm: the sentence names the dataset
    where = (rows[DATASET].astype(str).map(" on {}".format) if DATASET in rows
             else pd.Series("", index=rows.index))
    listed = ", ".join(f"{arm}{on} {int(k)} of {int(n)} (rate at most {b:.0%})"
                       for arm, on, k, n, b in zip(rows["ablation"], where, rows["n_diverged"],
                                                   rows["n_outcomes"],
                                                   rows["failure_rate_upper"]) if k > 0)
    return (f"Runs diverged: {listed}; each rate is a one-sided {1 - alpha:.0%} upper "
            f"confidence bound{cite('clopper1934')} on that variant's rate of divergence.")


def _command_run(model: str) -> Optional[str]:
    """A program's command line as its space recorded it (trials.parquet's ``model`` of the
    command contract, ``command:{json}``); None for other code."""
    if not model.startswith("command:"):
        return None
    try:
        return str(json.loads(model.removeprefix("command:"))["run"])
    except (ValueError, KeyError, TypeError):
        return ""


def _program(run: str) -> str:
    """The program a command line runs: its first word that is no interpreter or field."""
    try:
        words = shlex.split(run)
    except ValueError:
        words = run.split()
    for word in words:
        if not (word.startswith("{") or word in ("python", "python3", "-u", "-m")):
            return word
    return run or "a program"


def _passed(run: Optional[str], sources: str) -> str:
    """How the seeds reached the code: a command's placeholders, else the trial's seeds."""
    if run is not None:
        used = [f"{{{name}}}" for name in ("seed", "init_seed", "order_seed", "data_seed")
                if f"{{{name}}}" in run]
        return ("on its command line as " + ", ".join(used) if used else
                "in its environment (ABLATIONS_SEED and the per-source seeds)")
    return f"as trial.seeds, the sources {sources.replace(',', ', ')} varying with the seed"


def _data(trials: pd.DataFrame) -> str:
    """What the trials trained on, from trials.parquet's ``data_source``."""
    sources = sorted(set(trials["data_source"].dropna().astype(str))) \
        if "data_source" in trials else []
    if not sources:
        return "as the code loads it"
    named = ["the runner's synthetic set" if s.startswith("synthetic:") else
             "loaded by the code itself" if s == "own code" else f"the files in {s}"
             for s in sources]
    return ", ".join(dict.fromkeys(named))


def _seed_list(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _tex(text: str) -> str:
    """Text for LaTeX: its special characters escaped, the citations and math kept."""
    out = []
    for piece in text.split(r"~\cite{"):  # cite()'s, a tie before each
        if out:
            key, _, rest = piece.partition("}")
            out.append(r"~\cite{" + key + "}" + _escape(rest))
        else:
            out.append(_escape(piece))
    return "".join(out)


def _escape(text: str) -> str:
    """Plain text for LaTeX (:func:`~ablations.results.report.formatting.tex`), its Markdown
    code quotes dropped."""
    return tex(text.replace("`", ""))
