"""How the verdicts are decided travels as one object, ``Decision``
(ablations/config/comparison.py), from the request to the verdicts, the design's tables, the
summary and the report: no product function takes the settings as a dict or splats one."""

from __future__ import annotations

import ast

import pytest

from ablations.config.comparison import DEFAULT_DECISION, Decision
from ablations.experiment.api import Experiment
from ablations.experiment.core.request import UsageError
from ablations.results.stats.analyses import Analysis
from tests.test_sizes import product_files


def settings_dicts(tree: ast.AST) -> list[str]:
    """Each parameter named ``settings`` annotated as a dict or mapping, and each
    ``**settings`` in a call."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == "settings" and node.annotation is not None \
                and ast.unparse(node.annotation).startswith(("dict", "Mapping", "Optional[dict")):
            found.append(f"{node.lineno}: {node.arg}: {ast.unparse(node.annotation)}")
        if isinstance(node, ast.keyword) and node.arg is None \
                and isinstance(node.value, ast.Name) and node.value.id == "settings":
            found.append(f"{node.lineno}: **settings")
    return found


def test_no_product_function_passes_the_settings_as_a_dict():
    found = {str(path): hits for path in product_files()
             if (hits := settings_dicts(ast.parse(path.read_text())))}
    assert found == {}


def test_the_check_sees_both_forms():
    code = "def f(trials, settings: dict[str, Any]):\n    return g(trials, **settings)\n"
    assert len(settings_dicts(ast.parse(code))) == 2


def test_a_decision_fills_in_only_what_was_not_given():
    given = Decision(margin="2%")
    assert given.given() == {"margin": "2%"}
    filled = given.over(DEFAULT_DECISION)
    assert (filled.metric, filled.margin, filled.alpha, filled.reference) == (
        "test_mae", "2%", 0.05, "baseline")
    assert filled.terms() == {"reference": "baseline", "metric": "test_mae", "margin": "2%",
                              "alpha": 0.05}


def test_the_analysis_fills_a_decision_from_the_record_and_keeps_one_filled_in():
    meta = {"reference": "full", "planned": {"reference": "full", "metric": "val_mae",
                                             "margin": "3%", "alpha": 0.01,
                                             "max_failure_rate": 0.2}}
    analysis = Analysis(meta)
    recorded = analysis.decision()
    assert recorded == Decision(metric="val_mae", margin="3%", alpha=0.01,
                                max_failure_rate=0.2, reference="full")
    assert analysis.decision(Decision(alpha=0.1)).alpha == 0.1  # given: over the record
    assert analysis.decision(recorded) == recorded


def test_an_experiment_refuses_a_reference_in_its_decision():
    with pytest.raises(UsageError, match="reference: NAME"):
        Experiment("components", decision=Decision(reference="no_images"))
