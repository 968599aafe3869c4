"""The ablation table for a paper: LaTeX (booktabs), Markdown or CSV, from the verdict table
the report shows (:func:`ablations.results.stats.decisions.verdicts_of`), built with pandas' Styler.

One row per variant, the reference first: the metric's mean over the ok seeds with the
half-width of its t interval, the difference to the reference with the interval the
equivalence test reads, and the verdict as a marker (:data:`MARKERS`). Bold: the best
variant and every variant not distinguishable from it (:func:`not_distinguishable`). The
caption says which intervals, how many seeds, which tests, α and the margin (the sentences that
depend on its rows: :mod:`ablations.results.report.paper_captions`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from ablations.results.report.formatting import decimals_for, tex
from ablations.results.report.page import markdown_cells
from ablations.results.report.paper_captions import (
    failure_caption,
    tests_named,
    undecided_caption,
    unpaired_caption,
)
from ablations.results.stats.comparisons import holm, paired_p
from ablations.results.stats.failures import failure_bound_text
from ablations.results.stats.seed_tables import seed_table
from ablations.results.stats.verdicts import margin_text

Format = Literal["latex", "markdown", "csv"]
Width = Literal["column", "page"]
FORMATS = ("latex", "markdown", "csv")
FILES = {"latex": "table.tex", "markdown": "table.md", "csv": "table.csv"}  # by format
WIDE_FILE = "table_wide.tex"  # the LaTeX table across a two-column page (table*)
# verdict -> (marker in LaTeX, in text); explained in the caption
# (math in LaTeX: \dag in text mode pulls a bitmap font where cm-super is missing)
MARKERS = {"worse": (r"$\dagger$", "†"), "better": (r"$\ddagger$", "‡"),
           "equivalent": (r"$\approx$", "≈"), "negligible": (r"$\sim$", "∼"),
           "significant": (r"*", "*"), "inconclusive": ("?", "?"), "reference": ("", "")}
ARROWS = {1: "↑", -1: "↓"}  # the metric's better direction, beside its name
MEANINGS = {"worse": "worse", "better": "better", "equivalent": "equivalent",
            "negligible": "negligible (equivalent, and a difference)",
            "significant": "differs", "inconclusive": "inconclusive"}


def not_distinguishable(trials: pd.DataFrame, *, metric: str, direction: int,
                        alpha: float) -> set[str]:
    """The best variant by mean ``metric`` (``direction`` +1: highest, else lowest) and every
    variant whose paired difference to it over the seeds both ran is not significant (paired
    t-test, Holm over the variants, ``alpha``)."""
    ok = trials[trials["status"] == "ok"]
    values = seed_table(ok, metric)
    means = values.mean()
    best = means.idxmax() if direction > 0 else means.idxmin()
    others = [arm for arm in values.columns if arm != best]
    p_values = []
    for arm in others:
        pair = values[[best, arm]].dropna()
        p_values.append(paired_p(pair[best], pair[arm]) if len(pair) > 1 else np.nan)
    adjusted = holm(p_values) if others else np.array([])
    return {best, *(arm for arm, p in zip(others, adjusted) if not p < alpha)}


def paper_table(verdicts: pd.DataFrame, trials: pd.DataFrame, fmt: Format,
                width: Width = "column") -> str:
    """The table in ``fmt`` (LaTeX with its caption and booktabs rules, Markdown, or CSV of
    the numbers); the metric's name, direction and unit are the verdict table's (``attrs``).
    LaTeX's ``width``: ``column`` (:func:`column_form`) or ``page`` (``table*``, across a
    two-column page's width)."""
    a = verdicts.attrs
    metric, alpha, reference = a["metric"], a["alpha"], a["reference"]
    rows = verdicts.set_index("ablation")
    order = [reference, *(arm for arm in rows.index if arm != reference)]
    rows = rows.loc[order]
    if fmt == "csv":
        return _csv_table(rows, order, metric)
    latex = fmt == "latex"
    # the interval the equivalence test reads: the ratio's (in %) for a percentage margin
    relative = bool(a.get("relative")) and "ratio_ci_low" in rows
    failures = failure_caption(rows, alpha)
    header, cells = _cells(rows, order, a, latex=latex, relative=relative, failures=failures)
    bold = not_distinguishable(trials, metric=metric, direction=int(a.get("direction", 0)) or -1,
                               alpha=alpha)
    caption = _caption(rows, order, a, relative=relative, failures=failures)
    if not latex:
        marked = cells.copy()
        marked[header] = [f"**{v}**" if arm in bold else v
                          for arm, v in zip(cells.index, cells[header])]
        return markdown_cells(marked.reset_index())
    table = cells.reset_index()
    styler = table.style.hide(axis="index").format(tex, subset=["Variant"])
    styler = styler.apply(lambda column: ["font-weight: bold" if table.loc[i, "Variant"] in bold
                                          else "" for i in column.index], subset=[header])
    text = styler.to_latex(hrules=True, convert_css=True, position_float="centering",
                           column_format="l" + "r" * (len(table.columns) - 2) + "c",
                           caption=tex(caption), label=f"tab:{_label(metric)}")
    return column_form(text) if width == "column" else page_form(text)


def _csv_table(rows: pd.DataFrame, order: list[str], metric: str) -> str:
    """The numbers of the table as CSV: each variant's mean with its interval, Δ with the
    interval the equivalence test reads (and the ratio's), the verdict, the diverged runs."""
    return pd.DataFrame({
        "variant": order, "seeds": rows["n_ok"].to_numpy(),
        "mean": rows[f"{metric}_mean"].astype(float).to_numpy(),
        "ci_low": rows[f"{metric}_ci_low"].to_numpy(),
        "ci_high": rows[f"{metric}_ci_high"].to_numpy(),
        "diff": rows["diff_mean"].to_numpy(), "diff_ci_low": rows["tost_ci_low"].to_numpy(),
        "diff_ci_high": rows["tost_ci_high"].to_numpy(),
        **({"ratio_minus_1": rows["ratio"].to_numpy(),
            "ratio_ci_low": rows["ratio_ci_low"].to_numpy(),
            "ratio_ci_high": rows["ratio_ci_high"].to_numpy()} if "ratio" in rows else {}),
        "verdict": rows["verdict"].to_numpy(),
        **({"diverged": rows["n_diverged"].to_numpy(),
            "outcomes": rows["n_outcomes"].to_numpy(),
            "failure_rate_upper": rows["failure_rate_upper"].to_numpy()}
           if "failure_rate_upper" in rows else {})}).to_csv(index=False)


def _cells(rows: pd.DataFrame, order: list[str], a: dict, *, latex: bool, relative: bool,
           failures: str) -> tuple[str, pd.DataFrame]:
    """The mean column's header and the table's cells by variant: seeds (where the arms ran
    different numbers), mean ± half-width, Δ with its interval, each arm's diverged runs
    (where some diverged) and the verdict's marker."""
    metric, direction, unit = a["metric"], int(a.get("direction", 0)), a.get("unit", "")
    mean = rows[f"{metric}_mean"].astype(float)
    half = (rows[f"{metric}_ci_high"].astype(float) - rows[f"{metric}_ci_low"].astype(float)) / 2
    decimals = decimals_for([*mean, *half])
    pm = tex("±") if latex else "±"
    header = f"{metric}{f' ({unit})' if unit else ''} {ARROWS.get(direction, '')}".strip()
    header = tex(header) if latex else header
    cells = pd.DataFrame(index=pd.Index(order, name="Variant"))
    counts = rows["n_ok"].astype("Int64")
    if counts.dropna().nunique() > 1:  # the arms ran different numbers of seeds: each its own
        cells["n"] = [str(n) if pd.notna(n) else "0" for n in counts]
    cells[header] = [f"{m:.{decimals}f} {pm} {h:.{decimals}f}" if np.isfinite(h) else
                     f"{m:.{decimals}f}" for m, h in zip(mean, half)]
    title, deltas = _delta_column(rows, order, a["reference"], decimals, relative)
    cells[tex(title) if latex else title] = deltas
    cells["Verdict"] = [MARKERS.get(v, ("", ""))[0 if latex else 1] for v in rows["verdict"]]
    if failures and rows["n_diverged"].fillna(0).gt(0).any():  # each arm's own, beside it
        shown = [failure_bound_text(int(k), int(n), float(b)) for k, n, b in zip(
            rows["n_diverged"].fillna(0), rows["n_outcomes"].fillna(0),
            rows["failure_rate_upper"].astype(float))]
        cells.insert(len(cells.columns) - 1, "Diverged",
                     [tex(text) if latex else text for text in shown])
    return header, cells


def _delta_column(rows: pd.DataFrame, order: list[str], reference: str, decimals: int,
                  relative: bool) -> tuple[str, list[str]]:
    """The Δ column's title and cells: each variant's difference to the reference with the
    interval the equivalence test reads (``relative``: the ratio's, in %); the reference's
    cell empty."""
    if relative:
        delta, places, scale, title = "ratio", 1, 100.0, f"Δ vs {reference} (%)"
        low, high = rows["ratio_ci_low"].astype(float), rows["ratio_ci_high"].astype(float)
    else:
        delta, places, scale, title = "diff_mean", decimals, 1.0, f"Δ vs {reference}"
        low, high = rows["tost_ci_low"].astype(float), rows["tost_ci_high"].astype(float)
    return title, [
        "" if arm == reference or not np.isfinite(d) else
        f"{scale * d:+.{places}f} [{scale * lo:+.{places}f}, {scale * hi:+.{places}f}]"
        for arm, d, lo, hi in zip(order, rows[delta].astype(float), low, high)]


def _caption(rows: pd.DataFrame, order: list[str], a: dict, *, relative: bool,
             failures: str) -> str:
    """The caption, in plain text (tex() sets it for LaTeX): the intervals, the seeds, the
    tests, the margin and α, the markers, the bold rows, and what the verdicts leave open."""
    metric, alpha, reference, unit = a["metric"], a["alpha"], a["reference"], a.get("unit", "")
    seeds = sorted(set(rows["n_ok"].dropna().astype(int)))
    used = [v for v in MEANINGS if (rows["verdict"] == v).any()]
    markers = "; ".join(f"{MARKERS[v][1]} {MEANINGS[v]}" for v in used)
    span = (f"{seeds[0]}-{seeds[-1]} (n)" if len(seeds) > 1 else f"{seeds[0]}")
    margin = (f"±{100 * float(a['margin']):.3g}%" if a.get("relative") else
              f"±{float(a['margin']):.3g}{f' {unit}' if unit else ''}")
    delta_text = (f"mean over {reference}'s − 1 (%), with Fieller's" if relative else
                  f"paired difference to {reference}, with the")
    looks = " (each at its look)" if a.get("sequential") or a.get("pilot") else ""
    return (
        f"{metric}: mean ± half-width of its {1 - alpha:.0%} t interval, {span} seeds per "
        f"variant. Δ: {delta_text} {1 - 2 * alpha:.0%} interval the equivalence test reads. "
        f"Verdicts against {reference}{looks}: {tests_named(rows, reference, a)} and TOST, "
        f"margin {margin}, α = {alpha:g}, Holm over {a.get('comparisons', len(order) - 1)}"
        f"{'; ' + markers if markers else ''}. Bold: the best and every variant not "
        "distinguishable from it (paired t, Holm)." + (f" {failures}" if failures else "")
        + undecided_caption(rows, a) + unpaired_caption(rows, reference))


def column_form(latex: str) -> str:
    """A ``table`` that fits one column of a two-column paper: footnotesize, narrow column
    gaps, and scaled down to ``\\columnwidth`` only where it is still wider (graphicx's
    ``\\resizebox`` with the tabular's natural ``\\width``); needs ``\\usepackage{booktabs,
    graphicx}``."""
    latex = latex.replace("\\centering\n", "\\centering\n\\footnotesize\n"
                          "\\setlength{\\tabcolsep}{3pt}\n", 1)
    latex = latex.replace("\\begin{tabular}", "\\resizebox{\\ifdim\\width>\\columnwidth"
                          "\\columnwidth\\else\\width\\fi}{!}{%\n\\begin{tabular}", 1)
    return latex.replace("\\end{tabular}\n", "\\end{tabular}}\n", 1)


def page_form(latex: str) -> str:
    """The table across a two-column page (``table*``); in a one-column paper, as ``table``."""
    return latex.replace("\\begin{table}", "\\begin{table*}", 1).replace(
        "\\end{table}", "\\end{table*}", 1)


def effects_paper_table(effects: pd.DataFrame, fmt: Format) -> str:
    """A factorial design's main effects and two-factor interactions
    (:func:`ablations.results.stats.factorial.factorial_effects`) for a paper: each with its
    estimate, its 1 − α interval and its verdict's marker."""
    a = effects.attrs
    metric, alpha, unit = a["metric"], a["alpha"], a.get("unit", "")
    if fmt == "csv":
        return effects[["effect", "kind", "factors", "estimate", "ci_low", "ci_high",
                        "p_holm", "verdict"]].to_csv(index=False)
    latex = fmt == "latex"
    decimals = decimals_for(effects["estimate"].abs())
    cells = pd.DataFrame({
        "Effect": effects["effect"], "Factors": effects["factors"],
        "Estimate": [f"{e:+.{decimals}f} [{lo:+.{decimals}f}, {hi:+.{decimals}f}]"
                     for e, lo, hi in zip(effects["estimate"], effects["ci_low"],
                                          effects["ci_high"])],
        "Verdict": [MARKERS.get(v, ("", ""))[0 if latex else 1] for v in effects["verdict"]]})
    if not latex:
        return markdown_cells(cells)
    used = [v for v in MEANINGS if (effects["verdict"] == v).any()]
    markers = "; ".join(f"{MARKERS[v][1]} {MEANINGS[v]}" for v in used)
    caption = (
        f"Factorial effects on {metric}{f' ({unit})' if unit else ''}: "
        "a main effect is the mean change when a switch is flipped from the reference cell's "
        "value, averaged over the other factors' levels; an interaction A:B is y(both flipped) "
        "- y(A) - y(B) + y(reference). Estimates by OLS on the cells with the seeds as blocks "
        f"({a.get('df', '?')} residual degrees of freedom) with their {1 - alpha:.0%} "
        f"intervals; verdicts by t-test and TOST, margin {margin_text(a, unit)}, "
        f"alpha = {alpha:g}, Holm over {a.get('comparisons', len(effects))} effects"
        f"{'; ' + markers if markers else ''}.")
    styler = cells.style.hide(axis="index").format(tex, subset=["Effect", "Factors"])
    return column_form(styler.to_latex(hrules=True, position_float="centering",
                                       column_format="llrc", caption=tex(caption),
                                       label=f"tab:{_label(metric)}-effects"))


def tuned_paper_table(table: pd.DataFrame, fmt: Format) -> str:
    """A tuned ablation's verdicts at the configuration given and at each arm's own best
    (:func:`ablations.results.stats.tuned.side_by_side`) for a paper."""
    a = table.attrs
    metric, keys = a["metric"], a.get("keys", [])
    if fmt == "csv":
        return table.to_csv(index=False)
    latex = fmt == "latex"
    decimals = decimals_for([*table["mean_given"], *table["mean_tuned"]])

    def marker(verdict: object) -> str:
        return MARKERS.get(str(verdict), ("", ""))[0 if latex else 1]

    cells = pd.DataFrame({"Variant": table["ablation"]})
    for label, name in (("given", "at the given configuration"), ("tuned", "at its own best")):
        cells[f"{metric} {name}"] = [
            f"{m:.{decimals}f} {marker(v)}".strip() if pd.notna(m) else ""
            for m, v in zip(table[f"mean_{label}"], table[f"verdict_{label}"])]
    for key in keys:
        cells[f"best {key}"] = [f"{v:.3g}" if isinstance(v, float) else str(v)
                                for v in table.get(f"best_{key}", [""] * len(table))]
    if not latex:
        return markdown_cells(cells)
    used = sorted({str(v) for v in (*table["verdict_given"], *table["verdict_tuned"])}
                  & set(MEANINGS))
    markers = "; ".join(f"{MARKERS[v][1]} {MEANINGS[v]}" for v in used)
    caption = (f"Tuned ablations on {metric}: each arm's mean over its seeds at the baseline's "
               f"hyperparameters and at its own best ({', '.join(keys)} tuned with the same "
               "budget for every arm), each evaluation tested against the reference evaluated "
               f"the same way{'; ' + markers if markers else ''}.")
    cells.columns = [tex(str(column)) for column in cells.columns]
    styler = cells.style.hide(axis="index").format(tex, subset=["Variant"])
    return column_form(styler.to_latex(hrules=True, position_float="centering",
                                       caption=tex(caption),
                                       label=f"tab:{_label(metric)}-tuned"))


def across_paper_table(across: pd.DataFrame, fmt: Format, width: Width = "column") -> str:
    """The verdicts across datasets (:func:`ablations.results.stats.datasets.across_datasets`)
    for a paper: per ablation, the datasets pooled, the pooled ratio − 1 (%) with the
    interval the equivalence test reads, the prediction interval for a new dataset, how many
    datasets point the pooled way, and the verdict's marker."""
    a = across.attrs
    metric, alpha, reference = a["metric"], a["alpha"], a["reference"]
    if fmt == "csv":
        return across[["ablation", "n_datasets", "ratio", "tost_ci_low", "tost_ci_high",
                       "pi_low", "pi_high", "n_same_direction", "verdict", "p_holm",
                       "p_tost_holm"]].to_csv(index=False)
    latex = fmt == "latex"

    def percent(value: float) -> str:
        return f"{100 * value:+.1f}" if np.isfinite(value) else "–"

    cells = pd.DataFrame({
        "Variant": across["ablation"].astype(str),
        "k": across["n_datasets"].astype(int).astype(str),
        f"Ratio vs {reference} − 1 (%)": [
            f"{percent(r)} [{percent(lo)}, {percent(hi)}]" for r, lo, hi in
            zip(across["ratio"], across["tost_ci_low"], across["tost_ci_high"])],
        "New dataset (%)": [f"[{percent(lo)}, {percent(hi)}]" if np.isfinite([lo, hi]).all()
                            else "–" for lo, hi in zip(across["pi_low"], across["pi_high"])],
        "Same way": [f"{int(s)}/{int(k)}" for s, k in
                     zip(across["n_same_direction"], across["n_datasets"])],
        "Verdict": [MARKERS.get(str(v), ("", ""))[0 if latex else 1]
                    for v in across["verdict"]]})
    if not latex:
        return markdown_cells(cells)
    used = [v for v in MEANINGS if (across["verdict"] == v).any()]
    markers = "; ".join(f"{MARKERS[v][1]} {MEANINGS[v]}" for v in used)
    names = list(a.get("datasets", []))
    caption = (
        f"Ablations across {len(names)} datasets ({', '.join(names)}) on {metric}: the "
        f"variant's mean over {reference}'s on each dataset, pooled as the mean of the log "
        f"ratios (k datasets, t on k - 1 degrees of freedom), minus 1 (%), with its "
        f"{1 - 2 * alpha:.0%} interval, the one the equivalence test reads; New dataset: the "
        f"{1 - alpha:.0%} prediction interval of a new dataset's ratio (none from two "
        f"datasets); Same way: datasets "
        f"whose ratio points the pooled way. Verdicts: t-test and TOST on the pooled log "
        f"ratio, margin ±{100 * float(a['margin']):.3g}%, alpha = {alpha:g}, Holm over "
        f"{int(across['p_value'].notna().sum())} ablations{'; ' + markers if markers else ''}.")
    cells.columns = [tex(str(column)) for column in cells.columns]
    styler = cells.style.hide(axis="index").format(tex, subset=[cells.columns[0]])
    text = styler.to_latex(hrules=True, position_float="centering", column_format="lrrrrc",
                           caption=tex(caption), label=f"tab:{_label(metric)}-across")
    return column_form(text) if width == "column" else page_form(text)


def _label(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)
