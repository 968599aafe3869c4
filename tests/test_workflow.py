"""One α per workflow, settings fixed before the data (results/stats/planned.py): a fixed-seed table
is the pilot look of a sequential design recorded before its first trial, so continuing it
with --seeds auto changes nothing already decided and the whole workflow's error rates stay
within α (tools/workflow_simulation.py); `report` and `compare` on other settings than the
recorded ones say the table is exploratory. No Ray."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.cli.main import main
from ablations.experiment.core.design_options import Rounds
from ablations.experiment.prepare import prepare
from ablations.experiment.core.request import Request
from ablations.results.stats.analysis import verdict_table
from ablations.config.comparison import Decision
from ablations.results.stats.planned import planned_record
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.decisions import experiment_verdicts
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.shared_variance import PAIRED_TEST
from ablations.results.io.files import SCHEMA_VERSION
from tools.simulation import SPREAD
from tools.workflow_simulation import workflow_errors
from tests.test_analysis import _experiment
from tests.test_cli import assert_one_line_error, in_process


# ------------------------------------------------------------------------------ simulation


@pytest.mark.parametrize(("scenario", "spread"), [
    ("8 null arms", 3 * SPREAD),  # a full-alpha first table: 0.070 at 4000 experiments
    ("an arm at +5% + 4 null + 3 large effects", SPREAD),
])
def test_a_fixed_run_and_its_continuation_spend_alpha_once(scenario, spread):
    experiments = 2000
    rates = workflow_errors(scenario, spread=spread, experiments=experiments, seed=5)
    bound = 0.05 + 3 * np.sqrt(0.05 * 0.95 / experiments)
    assert rates["pilot"] <= bound, rates
    assert rates["continued_pilot"] > 0.9  # the continuation is offered: the workflow is whole
    # the first table's verdicts are the design's first look: continuing keeps every one,
    # where a full-alpha first table's continuation re-decided them
    assert rates["changed_pilot"] == 0 and rates["changed_full_alpha"] > 0, rates


# ------------------------------------------------------------------------------ the record


def test_a_default_run_records_the_design_it_is_the_pilot_of_before_the_data():
    planned = prepare(Request()).design.planned
    assert {k: planned[k] for k in ("reference", "metric", "margin", "alpha")} == \
        {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05}
    assert SeedDesign.from_dict(planned["design"]).looks == (3, 5, 7, 10)
    assert planned["seeds"] == list(range(10))
    # --max-seeds 3: one look, the fixed design at full alpha
    final = prepare(Request(design=Rounds(max_seeds=3))).design.planned
    assert SeedDesign.from_dict(final["design"]) == SeedDesign.fixed(3)
    # crossed seeds keep the fixed design: settings only
    crossed = prepare(Request(cross_seeds=True)).design.planned
    assert "design" not in crossed and crossed["margin"] == "5%"


@pytest.mark.parametrize(("flags", "pattern"), [
    (["--cross-seeds", "--max-seeds", "5"], "--max-seeds plans the rounds a fixed ablation "
     "table can be continued into; --cross-seeds keeps the fixed design"),
    (["--max-seeds", "2"], "--max-seeds 2 is below the 3 seeds run"),
])
def test_max_seeds_where_no_rounds_can_follow_is_one_line(capsys, tmp_path, flags, pattern):
    code, _, err = in_process(capsys, "--space", "components", "--dry-run", "--storage",
                              str(tmp_path), *flags)
    assert_one_line_error(code, err, pattern)


# ------------------------------------------------------------------------------ the verdicts


def _trials(seeds: int) -> pd.DataFrame:
    """baseline and four arms: no_w far worse, no_x worse (paired p 0.013 at 3 seeds),
    no_y equal, no_z slightly worse."""
    base = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.01]
    shifts = {"no_w": [0.5, 0.52, 0.49, 0.5, 0.51, 0.5, 0.5, 0.5, 0.5, 0.5],
              "no_x": [0.1, 0.12, 0.08, 0.11, 0.1, 0.09, 0.1, 0.1, 0.1, 0.1],
              "no_y": [0.01, -0.01, 0.0, 0.0, 0.01, -0.01, 0.0, 0.0, 0.0, 0.0],
              "no_z": [0.06, 0.02, 0.1, 0.05, 0.07, 0.03, 0.06, 0.05, 0.04, 0.06]}
    rows = [{"ablation": "baseline", "seed": s, "status": "ok", "test_mae": base[s]}
            for s in range(seeds)]
    rows += [{"ablation": arm, "seed": s, "status": "ok", "test_mae": base[s] + shift[s]}
             for arm, shift in shifts.items() for s in range(seeds)]
    return pd.DataFrame(rows)


def test_a_fixed_runs_verdicts_are_its_pilot_looks_and_continuing_keeps_them(tmp_path):
    # each arm's own paired test, recorded as an experiment's (the levels the case is built on)
    planned = planned_record(Decision(reference="baseline", metric="test_mae", margin="5%",
                                               alpha=0.05), seeds=[0, 1, 2], test=PAIRED_TEST)
    (tmp_path / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                          "planned": planned}))
    pilot = _trials(3)
    table = experiment_verdicts(str(tmp_path), pilot).set_index("ablation")
    # the fixed design at full alpha calls no_x worse; the pilot look spends half of alpha
    # for worse/better and does not
    fixed = verdict_table(pilot, test=PAIRED_TEST).set_index("ablation")
    assert fixed.loc["no_x", "verdict"] == "worse"
    assert table.loc["no_x", "verdict"] == "inconclusive"
    assert table.loc["no_w", "verdict"] == "worse" and table.attrs["pilot"]
    assert table.attrs["exploratory"] == []
    # the continuation (the same design, the arms without a verdict get seeds 3..9)
    design = SeedDesign.from_dict(planned["design"])
    more = _trials(10)
    decided = table.index[table["verdict"].isin(["worse", "better", "equivalent",
                                                 "negligible"])]
    more = more[~more["ablation"].isin(decided) | (more["seed"] < 3)]
    final = sequential_verdict_table(more, design, planned["seeds"],
                                     test=PAIRED_TEST).set_index("ablation")
    for arm in decided:
        assert final.loc[arm, "verdict"] == table.loc[arm, "verdict"]
        assert final.loc[arm, "decided_at"] == 3
    # settings other than the recorded ones: exploratory
    other = experiment_verdicts(str(tmp_path), pilot, margin="10%")
    assert other.attrs["exploratory"] == ["margin 10% (planned 5%)"]


def test_an_experiment_recorded_before_plans_reads_as_the_fixed_design(tmp_path):
    (tmp_path / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                          "reference": "baseline"}))
    table = experiment_verdicts(str(tmp_path), _trials(3)).set_index("ablation")
    assert table.loc["no_x", "verdict"] == "worse" and "pilot" not in table.attrs


# ------------------------------------------------------------------------------ report, compare


def _recorded(root: Path, **settings) -> Path:
    record = {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05,
              **settings}
    (root / "experiment.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                      "reference": "baseline",
                                                      "planned": record}))
    return root


def test_report_on_other_settings_than_recorded_is_labelled_exploratory(tmp_path, capsys):
    # a fixed run of 4 seeds, the pilot look of the design up to 10
    pilot = planned_record(Decision(reference="baseline", metric="test_mae", margin="5%",
                                             alpha=0.05), seeds=[0, 1, 2, 3])
    root = _recorded(_experiment(tmp_path / "exp"), **pilot)
    assert main(["report", str(root), "--figures", "png"]) == 0
    assert "EXPLORATORY" not in capsys.readouterr().out
    markdown = (root / "report.md").read_text()
    assert "## Verdicts\n" in markdown and "## Compute spent" not in markdown
    assert "These 4 seeds are the pilot look of a sequential design" in markdown
    assert main(["report", str(root), "--margin", "0.5", "--alpha", "0.1", "--figures", "png"]) == 0
    out = capsys.readouterr().out
    label = "EXPLORATORY: decided on margin 0.5 (planned 5%), alpha 0.1 (planned 0.05)"
    assert out.startswith(label), out
    markdown = (root / "report.md").read_text()
    assert "## Verdicts (exploratory)" in markdown and label in markdown
    assert "<h2>Verdicts (exploratory)</h2>" in (root / "report.html").read_text()


def test_compare_on_other_settings_than_recorded_is_labelled_exploratory(tmp_path, capsys):
    a = _recorded(_experiment(tmp_path / "a"))
    b = _recorded(_experiment(tmp_path / "b"), margin="10%")
    assert main(["compare", str(a), str(a)]) == 0
    assert "EXPLORATORY" not in capsys.readouterr().out
    # a setting left out is A's: not a departure, whatever B planned
    assert main(["compare", str(a), str(b)]) == 0
    assert "EXPLORATORY" not in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--margin", "10%"]) == 0
    assert capsys.readouterr().out.startswith(
        "EXPLORATORY: decided on margin 10% (planned 5%) in A")
