"""Branches on the run kind stay inside the designs (issue "House III": a design is the unit of
extension; ablations/experiment/designs/ holds each one's planning, running and recording, and
results/stats/analyses.py its analysis). A branch is an ``if``/``elif``/``while`` or a
conditional expression whose test reads what kind of run this is: a tuned, factorial, search,
sequential, plug-in or several-dataset run (names in :data:`KIND_NAMES`), or compares the
design or the seeds with a design's name (``args.design == "factorial"``, ``seeds == "auto"``).

None remains outside the designs (:data:`REMAINING` is empty): this test fails on any new one.
What is not a branch on the kind: a function that parses a field's value (:data:`PARSERS`).

Outside the designs, no code reads a design's capability flag either (``kind.crosses_seeds``,
``design.has_verdicts``: :data:`CAPABILITIES`; the design refuses or does what its flag said,
behind its own methods), and none silences a design's errors (``contextlib.suppress`` or an
``except`` around a call on a design, an analysis or a design's report: a design that cannot
make a table says so itself).

Each built-in design has one name, with no alias: its key in ``registry.BUILT_IN`` is its
module's under designs/, its class's (capitalised), its record key in experiment.json, its
options' ``kind``, its analysis's name and module (``results/stats/analysis_<name>.py``) and
the first word of every class those modules define (``RoundsRun``, ``RoundsAnalysis``,
``RoundsReport``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("ablations", "results")
# the designs' code: the run side, the results side (each design's analysis) and the report's
DESIGNS = ("ablations/experiment/designs/", "ablations/experiment/core/design_options.py",
           "results/stats/analyses.py", "results/stats/analysis_", "results/report/designs.py")
# what a design declares it can do, read by the code around it to choose what to do
CAPABILITIES = frozenset({"has_verdicts", "crosses_seeds", "continues_into_rounds", "grows",
                          "takes_factors", "takes_scheduler"})
# the objects whose methods are a design's: a design, its class, its analysis, its report
DESIGN_OBJECTS = frozenset({"design", "kind", "analysis", "report"})
KIND_NAMES = frozenset({"tune_each", "factorial", "is_across_datasets", "hpo", "sequential",
                        "tuned", "is_plugin", "is_search"})
DESIGN_WORDS = frozenset({"factorial", "auto", "table", "tuned", "search", "rounds"})
COMPARED = frozenset({"design", "seeds", "kind"})
# functions that parse a field's value, not the kind of a run: the seeds field's value "auto"
PARSERS = {("ablations/experiment/core/request.py", "seeds_from")}
# file -> branches on the run kind it holds outside the designs: none
REMAINING: dict[str, int] = {}


def _names(node: ast.AST) -> set[str]:
    return {getattr(sub, "attr", getattr(sub, "id", "")) for sub in ast.walk(node)
            if isinstance(sub, (ast.Attribute, ast.Name))}


def reads_the_kind(test: ast.AST) -> bool:
    if _names(test) & KIND_NAMES:
        return True
    for sub in ast.walk(test):
        if isinstance(sub, ast.Compare):
            words = {c.value for c in ast.walk(sub)
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if words & DESIGN_WORDS and _names(sub) & COMPARED:
                return True
    return False


def kind_branches(source: str, parsers: frozenset[str] = frozenset()) -> list[int]:
    """The lines of ``source``'s branches on the run kind, outside the functions named in
    ``parsers``."""
    tree = ast.parse(source)
    skipped = {id(node) for function in ast.walk(tree)
               if isinstance(function, ast.FunctionDef) and function.name in parsers
               for node in ast.walk(function)}
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, (ast.If, ast.IfExp, ast.While))
                  and id(node) not in skipped and reads_the_kind(node.test))


def test_the_scan_finds_a_branch_on_the_kind_and_not_an_ordinary_one():
    assert kind_branches("if args.design == 'factorial':\n    pass\n") == [1]
    assert kind_branches("x = 1 if args.tune_each else 2\n") == [1]
    assert kind_branches("if is_across_datasets(trials):\n    pass\n") == [1]
    assert kind_branches("if args.seeds == 'auto':\n    pass\n") == [1]
    assert kind_branches("if margin == 'auto':\n    pass\nif seeds > 3:\n    pass\n") == []
    parser = "def seeds_from(seeds):\n    if seeds != 'auto':\n        pass\n"
    assert kind_branches(parser) == [2] and kind_branches(parser, frozenset({"seeds_from"})) == []


def test_no_new_branch_on_the_run_kind_outside_the_designs():
    found = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(DESIGNS):
                continue
            lines = kind_branches(path.read_text(), frozenset(
                function for file, function in PARSERS if file == name))
            if lines:
                found[name] = lines
    grown = {name: lines for name, lines in found.items()
             if len(lines) > REMAINING.get(name, 0)}
    assert not grown, ("branches on the run kind outside the designs (move them into the "
                       f"design, ablations/experiment/designs/): {grown}")
    # a site moved into a design leaves the list too: the list is what the source holds
    assert {name: len(lines) for name, lines in found.items()} == REMAINING


def capability_reads(source: str) -> list[int]:
    """The lines of ``source`` that read a design's capability flag (an attribute named in
    :data:`CAPABILITIES`)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Attribute) and node.attr in CAPABILITIES)


def _calls_a_design(nodes: list[ast.stmt]) -> bool:
    """Whether ``nodes`` call a method of a design, an analysis or a report
    (``design.tables(...)``, ``report_of(analysis).summary(...)``)."""
    for node in (sub for stmt in nodes for sub in ast.walk(stmt)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and _names(node.func.value) & DESIGN_OBJECTS:
            return True
    return False


def silenced_design_calls(source: str) -> list[int]:
    """The lines of ``source``'s ``with contextlib.suppress(...)`` blocks, and ``try`` blocks
    with an ``except`` that raises nothing, whose body calls a design's method."""
    found = []
    for node in ast.walk(ast.parse(source)):
        suppressing = isinstance(node, ast.With) and any(
            isinstance(item.context_expr, ast.Call) and "suppress" in _names(item.context_expr.func)
            for item in node.items)
        swallowing = isinstance(node, ast.Try) and any(
            not any(isinstance(sub, ast.Raise) for stmt in handler.body for sub in ast.walk(stmt))
            for handler in node.handlers)
        if (suppressing or swallowing) and _calls_a_design(node.body):
            found.append(node.lineno)
    return sorted(found)


def outside_the_designs(scan) -> dict[str, list[int]]:
    """``scan``'s lines in each product file outside the designs' code."""
    found = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if not name.startswith(DESIGNS) and (lines := scan(path.read_text())):
                found[name] = lines
    return found


def test_the_scans_find_a_capability_read_and_a_silenced_design_call():
    assert capability_reads("if kind.crosses_seeds:\n    pass\nx = design.has_verdicts\n") \
        == [1, 3]
    assert capability_reads("x = design.tables(trials)\n") == []
    silenced = ("with contextlib.suppress(ValueError, KeyError):\n"
                "    effects = design.tables(trials, meta, decision)\n")
    assert silenced_design_calls(silenced) == [1]
    caught = ("try:\n    text = report_of(analysis).summary(trials)\n"
              "except ValueError:\n    text = ''\n")
    assert silenced_design_calls(caught) == [1]
    ordinary = ("with contextlib.suppress(ValueError):\n    sys.path.remove(folder)\n"
                "try:\n    value = float(text)\nexcept ValueError:\n    value = 0.0\n")
    assert silenced_design_calls(ordinary) == []
    reraised = ("try:\n    design.execute(trials)\n"
                "except KeyboardInterrupt:\n    raise Interrupted() from None\n")
    assert silenced_design_calls(reraised) == []


def test_no_capability_flag_is_read_outside_the_designs():
    assert outside_the_designs(capability_reads) == {}


def test_no_design_call_is_silenced_outside_the_designs():
    assert outside_the_designs(silenced_design_calls) == {}


def _defined_classes(module) -> list[type]:
    return [value for value in vars(module).values()
            if isinstance(value, type) and value.__module__ == module.__name__]


def design_aliases(built_in: dict[str, str]) -> list[str]:
    """Where a built-in design (``built_in``: name -> ``module:Class``) goes by another name:
    its module, its class, its record key, its options' kind, its analysis (name, record key,
    module, class), its report, or a class its modules define."""
    import importlib

    from ablations.experiment.core.design_options import BUILT_IN_OPTIONS
    from ablations.results.report.designs import REPORTS
    from ablations.results.stats.analyses import ANALYSES
    from ablations.results.stats.analysis_table import Analysis

    found = [f"options {options.__name__}: kind {options.kind!r}" for options in BUILT_IN_OPTIONS
             if options.kind not in built_in or options.__name__ != options.kind.capitalize()]
    for name, spec in built_in.items():
        title, (path, _, cls) = name.capitalize(), spec.partition(":")
        module = importlib.import_module(path)
        design = getattr(module, cls)
        # the analysis experiment.json's record picks (analyses.analysis_of; none: the base's)
        analysis = next((known for known in ANALYSES.values()
                         if known.record_key == design.record_key),
                        Analysis if design.record_key is None else None)
        found += [f"{name}: {what}" for what, same in [
            (f"module {path}", path.rpartition(".")[2] == name),
            (f"class {cls}", cls == title),
            (f"record key {design.record_key!r}", design.record_key in (name, None)),
            ("no analysis of its record", analysis is not None),
        ] if not same]
        if analysis is None:
            continue
        analysis_module = importlib.import_module(analysis.__module__)
        report = REPORTS.get(analysis)
        found += [f"{name}: {what}" for what, same in [
            (f"analysis name {analysis.name!r}", analysis.name == name),
            (f"analysis module {analysis.__module__}",
             analysis.__module__.rpartition(".")[2] == f"analysis_{name}"),
            (f"analysis {analysis.__name__}",
             analysis.__name__ == f"{title}Analysis" or analysis is Analysis),
            (f"report {getattr(report, '__name__', None)}",
             report is None or report.__name__ in (f"{title}Report", "DesignReport")),
        ] if not same]
        found += [f"{name}: class {defined.__name__} in {defined.__module__}"
                  for defined in _defined_classes(module) + _defined_classes(analysis_module)
                  if not defined.__name__.startswith(title) and defined is not Analysis]
    return found


def test_each_built_in_design_goes_by_one_name():
    from ablations.experiment.designs.registry import BUILT_IN

    assert set(BUILT_IN) == {"table", "factorial", "tuned", "search", "rounds"}
    assert design_aliases(BUILT_IN) == []


def test_the_alias_scan_finds_a_design_under_another_name():
    from ablations.experiment.designs.registry import BUILT_IN

    renamed = {**BUILT_IN, "rounds": "ablations.experiment.designs.tuned:Tuned"}
    found = design_aliases(renamed)
    assert "rounds: module ablations.experiment.designs.tuned" in found
    assert "rounds: class Tuned" in found and "rounds: record key 'tuned'" in found
    assert "rounds: class TunedRun in ablations.experiment.designs.tuned" in found
    assert any(line.startswith("options Rounds") for line in
               design_aliases({k: v for k, v in BUILT_IN.items() if k != "rounds"}))
