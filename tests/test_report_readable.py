"""The report reads well: numbers with 2-3 significant digits and units, p-values as `< 0.001`,
bins labelled by their range without float noise, the answer first, long tables folded, and in
a real browser (headless Chromium, when installed) every figure loads and nothing overflows a
1366 px screen. No Ray."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pandas as pd
import pytest

from tools.browser_check import find_chromium
from ablations.results.report.formatting import (Column, decimals_for, number, p_value, plain,
                                                 readable, unit_of)
from ablations.results.stats.strata import interval_order, quantile_bins
from tests.test_analysis import _experiment


def test_p_values_read_as_p_values():
    assert [p_value(p) for p in (0.0, 1e-9, 0.00099, 0.001, 0.0123, 0.5, 1.0)] == [
        "< 0.001", "< 0.001", "< 0.001", "0.001", "0.012", "0.500", "1.000"]
    assert p_value(float("nan")) == "" and p_value(None) == ""


def test_a_column_shares_its_decimals_and_differences_carry_a_sign():
    values = [0.5403, 0.0006629, 0.961]  # what the old report printed side by side
    decimals = decimals_for(values)
    assert decimals == 3 and [number(v, decimals) for v in values] == ["0.540", "0.001", "0.961"]
    assert number(0.409, 3, signed=True) == "+0.409" and number(-0.0001, 3, signed=True) \
        == "0.000"
    assert decimals_for([1234.5, 17.0]) == 0 and number(1234.5, 0) == "1,234"
    frame = pd.DataFrame({"a": ["x", "y"], "d": [0.4, -0.01], "lo": [0.3, -0.05],
                          "hi": [0.5, 0.03], "p": [1e-5, 0.2], "n": [3, 2]})
    shown = readable(frame, [Column("A", "a", "text"), Column("Δ (km)", "d", "difference"),
                             Column("CI", ("lo", "hi"), "interval", decimals_from="d"),
                             Column("p", "p", "p"), Column("n", "n", "count")])
    assert shown.to_dict("records") == [
        {"A": "x", "Δ (km)": "+0.400", "CI": "[0.300, 0.500]", "p": "< 0.001", "n": "3"},
        {"A": "y", "Δ (km)": "-0.010", "CI": "[-0.050, 0.030]", "p": "0.200", "n": "2"}]
    assert unit_of("test_mae") == "km" and unit_of("test_r2") == ""
    raw = pd.DataFrame({"ablation": ["x"], "p_holm": [0.0002], "n": [5], "crps": [0.123456]})
    assert plain(raw).iloc[0].tolist() == ["x", "< 0.001", "5", "0.123"]


def test_bins_are_labelled_by_their_range_without_float_noise():
    rng = np.random.default_rng(0)
    speed = pd.Series(np.r_[0.0, rng.uniform(0, 1.2, 400)])  # qcut moves its first edge below 0
    assert str(pd.qcut(speed, 4).cat.categories[0]).startswith("(-0.0")  # below the min
    labels = quantile_bins(speed, 4)
    levels = sorted(labels.unique(), key=interval_order)
    assert len(levels) == 4 and levels[0].startswith("0.00–"), levels
    assert all(re.fullmatch(r"-?\d+\.\d{2}–-?\d+\.\d{2}", level) for level in levels), levels
    ends = [float(level.split("–")[1]) for level in levels]
    assert ends == sorted(ends) and ends[-1] == round(speed.max(), 2)
    # every value is in the bin its label names
    for value, label in zip(speed, labels):
        low, high = (float(x) for x in label.split("–"))
        assert low - 0.005 <= value <= high + 0.005
    narrow = pd.Series(np.linspace(1.0, 1.003, 40))  # more decimals where two labels would tie
    assert len(set(quantile_bins(narrow, 4))) == 4


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from ablations.results.report.build import write_report

    return write_report(_experiment(tmp_path_factory.mktemp("readable") / "exp"))


def _significant(token: str) -> int:
    digits = token.lstrip("+-").replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def test_the_answer_comes_first_with_readable_numbers(report):
    markdown = report.markdown.read_text()
    verdicts = markdown[markdown.index("## Verdicts"):markdown.index("## Differences")]
    rows = [line for line in verdicts.splitlines() if line.startswith("| ")][2:]
    assert rows, verdicts
    for row in rows:
        for token in re.findall(r"[-+]?\d[\d,]*\.?\d*", row):
            assert _significant(token) <= 3, (token, row)
    assert markdown.index("## Verdicts") < markdown.index("![Differences to the reference]") \
        < markdown.index("## By stratum") < markdown.index("## Learning curves") \
        < markdown.index("## Appendix")
    page = report.html.read_text()
    for folded in ("Ablation table", "Uncertainty (single models)", "Errors by stratum"):
        assert f"<details><summary>{folded}</summary>" in page
    assert "0.0000" not in markdown and "e-0" not in markdown


@pytest.mark.skipif(find_chromium() is None, reason="needs Chromium (apt-get install chromium)")
@pytest.mark.slow
def test_in_a_browser_the_figures_load_and_nothing_overflows_1366_px(report, tmp_path):
    from tools.browser_check import checks, main, measure

    chromium = find_chromium()
    measured = measure(report.html, chromium, width=1366)
    results = {check.name: check for check in checks(measured, 1366)}
    assert all(check.ok for check in results.values()), results
    assert len(measured["images"]) == 4
    assert main([str(report.html), "--screenshot", str(tmp_path / "top.png")]) == 0
    assert (tmp_path / "top.png").read_bytes()[:4] == b"\x89PNG"
    # the check sees a page that overflows, and a figure that does not load
    page = report.html.read_text()
    wide = tmp_path / "wide.html"
    wide.write_text(page.replace("<h2>Verdicts</h2>", "<h2>Verdicts</h2><table><tr>"
                                 + "<td>0.123456789</td>" * 60 + "</tr></table>", 1))
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace("base64,iVBOR", "base64,XXXX"))
    assert [c.ok for c in checks(measure(wide, chromium), 1366)] == [True, False]
    assert [c.ok for c in checks(measure(broken, chromium), 1366)] == [False, True]
    assert main([str(broken)]) == 1


def test_every_figure_comes_as_a_pdf_with_truetype_fonts_and_an_svg_of_paths(report):
    figures = sorted((report.markdown.parent / "report_files").glob("*.png"))
    assert len(figures) >= 3, figures
    for png in figures:
        for size in ("", "-page", "-column"):  # the report's, a page's and a column's
            pdf = png.with_name(f"{png.stem}{size}.pdf").read_bytes()
            svg = png.with_name(f"{png.stem}{size}.svg").read_text()
            assert pdf.startswith(b"%PDF") and b"/FontFile2" in pdf  # TrueType, embedded
            assert b"/Type3" not in pdf
            assert "<svg" in svg and "<text" not in svg  # the glyphs are paths
        widths = {}
        for size in ("page", "column"):
            box = re.search(rb"/MediaBox \[ *0 0 ([0-9.]+)",
                            png.with_name(f"{png.stem}-{size}.pdf").read_bytes())
            widths[size] = float(box.group(1)) / 72  # inches
        assert widths["page"] == pytest.approx(6.75, abs=0.02)
        assert 2.5 < widths["column"] <= 3.4  # a column, its legend and labels taken in


def test_figures_png_writes_the_pngs_alone_and_removes_their_earlier_vector_files(report,
                                                                                  tmp_path):
    from ablations.cli.main import main

    root = tmp_path / "exp"
    shutil.copytree(report.markdown.parent, root)  # the default report's: PNG, PDF and SVG
    figures = root / "report_files"
    pngs = {png.name for png in figures.glob("*.png")}
    assert len(pngs) == 4 and {file.name for file in figures.iterdir()} == pngs | {
        f"{png.removesuffix('.png')}{size}.{suffix}" for png in pngs
        for size in ("", "-page", "-column") for suffix in ("pdf", "svg")}
    (figures / "forest.png").write_bytes(b"old")
    (figures / "notes.pdf").write_bytes(b"the researcher's own")
    assert main(["report", str(root), "--figures", "png"]) == 0
    assert {file.name for file in figures.iterdir()} == pngs | {"notes.pdf"}
    assert (figures / "forest.png").read_bytes()[:4] == b"\x89PNG"
