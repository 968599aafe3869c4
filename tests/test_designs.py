"""The design interface (ablations/experiment/designs/) is the one docs/architecture.md shows:
every design has its methods, is rebuilt from the experiment.json it records, and has its text
in the design's own describing methods; nothing outside the designs compares a design's kind."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pandas as pd
import pytest

from ablations.experiment.designs.text import describe_trials
from ablations.config import TrialConfig
from ablations.experiment.designs.base import Design
from ablations.experiment.core.request import UsageError
from ablations.experiment.designs.factorial import Factorial
from ablations.experiment.designs.table import Table
from ablations.experiment.designs.search import SearchRun, Search, SearchTune
from ablations.experiment.designs.parts import Parts, stopped
from ablations.experiment.designs.records import RECORDED, design_from_record
from ablations.experiment.designs.rounds import Rounds, RoundsRun
from ablations.experiment.execution.tune_setup import TableTune, TuneSetup
from ablations.experiment.designs.tuned import Tuned, TunedRun
from ablations.experiment.core.options import ExperimentResult, RunOptions
from ablations.results.stats.factorial_design import FactorialDesign
from ablations.results.stats.sequential import SeedDesign
from ablations.search_spaces import TrialSpec

ROOT = Path(__file__).resolve().parents[1]
DESIGNS = [Table, Factorial, Search, Rounds, Tuned]


def documented(interface: str) -> dict[str, list[str]]:
    """The methods docs/architecture.md shows for ``class <interface>``: name -> parameters."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Adding a design", 1)[1]
    block = re.search(rf"```python\nclass {interface}:\n(.*?)```", section, re.S).group(1)
    tree = ast.parse(f"class {interface}:\n{block}")
    return {node.name: [a.arg for a in [*node.args.args, *node.args.kwonlyargs]]
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def spec(variant: str, seed: int, **overrides) -> TrialSpec:
    config = TrialConfig.of(ablation=variant, seed=seed, epochs=1, **overrides)
    return TrialSpec(f"{variant}-seed{seed}", variant, seed, config)


def examples() -> list[Design]:
    plan = {s.name: s for s in (spec(v, seed) for v in ("baseline", "no_images")
                                for seed in range(4))}
    rounds = RoundsRun(SeedDesign.plan(2, 4), [0, 1, 2, 3], "baseline", "test_mae", "5%",
                           0.05, plan)
    rounds.rounds = [{"round": 1, "tune": "tune",
                      "trials": [n for n, s in plan.items() if s.seed < 2]}]
    return [Table(), Factorial(FactorialDesign.plan(["temporal_attention", "spatial_attention"],
                                                   [True, True], "baseline")),
            Search(SearchRun(base=TrialConfig.of(epochs=2), space={"lr": ("loguniform",
                                                                          (1e-4, 1e-2))},
                             num_samples=3)),
            Rounds(rounds, "/tmp/x"),
            Tuned(TunedRun(["lr"], 3, 1000, "baseline", plan), "/tmp/x")]


@pytest.mark.parametrize("interface, classes", [("Design", DESIGNS),
                                                ("TuneSetup", [TableTune, SearchTune])])
def test_every_design_and_tune_setup_has_the_documented_methods(interface, classes):
    methods = documented(interface)
    assert len(methods) >= 5, methods
    base = {"Design": Design, "TuneSetup": TuneSetup}[interface]
    for name, params in methods.items():
        if params[:1] == ["cls"]:  # a classmethod: getattr gives it bound
            params = params[1:]
        assert params == list(inspect.signature(getattr(base, name)).parameters)[
            :len(params)], (interface, name, params)
        for cls in classes:
            assert callable(getattr(cls, name)), (cls, name)
    public = {n for n, v in vars(base).items() if callable(v) and not n.startswith("_")}
    assert public <= set(methods) | {"planned"}, public - set(methods)


@pytest.mark.parametrize("design", examples(), ids=lambda d: type(d).__name__)
def test_a_design_is_rebuilt_from_the_record_it_writes(design):
    design.planned = {"reference": "baseline", "metric": "test_mae", "margin": "5%",
                      "alpha": 0.05}
    meta: dict = {"trials": {}, "search": None, "planned": design.planned}  # the runner's fields
    design.record(meta)
    again = design_from_record(meta, "/tmp/x")
    assert type(again) is type(design) and again.planned == design.planned
    rebuilt: dict = {"trials": {}, "search": None, "planned": design.planned}
    again.record(rebuilt)
    assert rebuilt == meta
    assert again.same_plan_as(design, [], [], "/tmp/x")


def test_every_recorded_design_has_its_own_key():
    keys = [design.record_key for design in RECORDED]
    assert all(keys) and len(set(keys)) == len(keys) and Table.record_key is None


@pytest.mark.parametrize("design", examples(), ids=lambda d: type(d).__name__)
def test_every_design_has_its_console_text(design):
    trials = [spec("baseline", 0), spec("no_images", 0)]
    assert design.count_text(trials, [0, 1]).split()[0].isdigit()
    assert isinstance(design.dry_run_lines(0.05), list)
    lines = design.describe(trials, TrialConfig(), [])
    assert lines and "Base configuration:" in lines[-1]


def test_a_designs_count_is_its_own():
    grid, factorial, search, rounds, stages = examples()
    trials = [spec("baseline", 0), spec("no_images", 0)]
    assert grid.count_text(trials, [0]) == "2 trials (2 variants x 1 seeds)"
    assert factorial.count_text(trials, [0]).endswith("2^2 full factorial x 1 seeds)")
    assert search.count_text([], [0]) == "3 sampled trials"
    assert rounds.count_text(trials, [0]).startswith("2 variants, seeds in rounds")
    assert stages.count_text(trials, [0]).endswith("8 + 6 + 8 trials")


def test_parts_sum_the_drivers_time_and_know_a_stop(tmp_path):
    options = RunOptions(storage=tmp_path, name="x", space="components")
    parts = Parts(Table(), options, str(tmp_path))
    frame = pd.DataFrame({"status": ["ok", "ok"]})
    first = parts.add(ExperimentResult(tmp_path, frame, frame, frame, wall_s=2.0))
    second = parts.add(ExperimentResult(tmp_path, frame, frame, frame, wall_s=3.0))
    assert (first.wall_s, second.wall_s) == (2.0, 5.0)
    assert not stopped(frame) and stopped(pd.DataFrame({"status": ["ok", "interrupted"]}))
    assert parts.earlier_rows(["a"]) is None  # no trials.parquet yet


KIND_WORDS = {"grid", "hpo", "factorial", "tuned", "sequential", "seeds-auto", "round"}


def kind_checks(path: Path, records: bool = True) -> list[str]:
    """A design's kind asked outside the designs: ``x.kind``, or (``records``) experiment.json's
    design records looked up by key (``meta.get("tuned")``, ``meta["sequential"]``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "kind" \
                and "spec" not in ast.unparse(node.value):  # a tracker's spec.kind is its own
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif not records:
            continue
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in KIND_WORDS:
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and node.slice.value in KIND_WORDS:
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_kind_checks_in_the_command_line_the_runner_or_planning():
    """No ``.kind`` in the command line, the runner, planning or the API; and the command
    line's run and resume rebuild and compare designs, not experiment.json's records by key
    (the summary's verdicts read the record they decide with: results/stats/decisions.py)."""
    experiment = ROOT / "ablations" / "experiment"
    runner = experiment / "execution" / "runner.py"
    files = [*sorted((ROOT / "ablations" / "cli").glob("*.py")), runner,
             experiment / "prepare.py", experiment / "api.py"]
    assert [found for path in files for found in kind_checks(path, records=False)] == []
    cli = ROOT / "ablations" / "cli"
    runs = [cli / "main.py", cli / "run.py", experiment / "api.py", runner]
    assert [found for path in runs for found in kind_checks(path)] == []


@pytest.mark.parametrize("text", ['if strategy.kind == "tuned": pass\n',
                                  'x = meta.get("factorial")\n', 'x = previous["sequential"]\n'])
def test_the_kind_check_sees_each_form(tmp_path, text):
    probe = tmp_path / "probe.py"
    probe.write_text(text)
    assert kind_checks(probe), text


def test_the_dry_run_lists_only_what_differs_and_a_mapped_setting_with_what_was_asked():
    from ablations.search_spaces import TrialSpec

    base = TrialConfig()
    # planning records what was asked for beside every trial's systems settings
    asked = base.replace(compile_requested="off", precision_requested="fp32")
    mapped = base.replace(ablation="no_images", use_images=False, compile="default",
                          compile_requested="max-autotune", precision_requested="fp32")
    trials = [TrialSpec("baseline-seed0", "baseline", 0, asked),
              TrialSpec("no_images-seed0", "no_images", 0, mapped)]
    lines = describe_trials(trials, base).splitlines()
    assert lines[-2].split() == ["1.", "baseline-seed0", "(base)"]
    assert lines[-1].split(None, 2)[2] == ("use_images=False, compile=default, "
                                           "compile_requested=max-autotune")
    assert not any("requested:" in line for line in lines)  # not in the base's listing


# the built-in designs' options (core/design_options.py) and the designs' capabilities, kept off the
# request, its groups and the experiment
DESIGN_OPTIONS = {"factors", "tune_each", "tune_budget", "num_samples", "scheduler", "pilot",
                  "max_seeds"}
CAPABILITIES = {"takes_factors", "takes_scheduler", "crosses_seeds", "continues_into_rounds",
                "has_verdicts", "grows"}


def test_neither_the_request_nor_the_experiment_holds_a_design_option():
    import dataclasses
    from ablations.experiment.api import Experiment
    from ablations.experiment.core.request import Request

    from ablations.config.comparison import Decision
    from ablations.experiment.core import groups

    fields = {field.name for field in dataclasses.fields(Request)}
    arguments = set(inspect.signature(Experiment).parameters)
    grouped = {field.name for group in (groups.Seeds, Decision, groups.Resources)
               for field in dataclasses.fields(group)}
    assert not (fields | arguments | grouped) & (DESIGN_OPTIONS | CAPABILITIES)
    assert {"design"} <= fields & arguments


def test_a_design_asked_for_with_its_options_plans_from_them():
    from ablations import Experiment, Factorial, Search, Tuned
    from ablations.experiment.designs.factorial import Factorial as FactorialDesign
    from ablations.experiment.designs.search import Search as SearchDesign

    factors = ("temporal_attention", "spatial_attention")
    prepared = Experiment(design=Factorial(factors=list(factors)), seeds=2).prepared()
    assert isinstance(prepared.design, FactorialDesign)
    assert tuple(prepared.design.factorial.factors) == factors
    search = Experiment("hpo", design=Search(num_samples=5, scheduler="fifo")).prepared()
    assert isinstance(search.design, SearchDesign)
    assert (search.design.search.num_samples, search.design.search.scheduler) == (5, "fifo")
    with pytest.raises(UsageError, match=r"tune_budget: 1 must be an integer >= 2"):
        Experiment(design=Tuned(each=["lr"], budget=1)).plan()
    with pytest.raises(UsageError, match="num_samples: space components is an ablation table"):
        Experiment(design=Search(num_samples=5)).plan()


@pytest.mark.parametrize("given, error", [
    ({"factors": "a,b"}, "factors applies with design factorial only"),
    ({"tune_budget": 4}, "tune_budget applies with tune_each only"),
    ({"tune_each": "lr", "scheduler": "asha"}, "tune_each and num_samples or scheduler"),
])
def test_the_flags_of_two_designs_or_of_none_are_refused(given, error):
    from ablations.experiment.core.design_options import options_from

    with pytest.raises(UsageError, match=error):
        options_from("table", given)
