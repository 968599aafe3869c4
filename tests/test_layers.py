"""The packages form layers and import one way: a module never imports (at the top or inside a
function) from a layer above its own. The layers, lowest first, are listed in LAYERS; the
README's layout (docs/architecture.md) describes the same. Within a layer, modules import
without cycles, and a function imports no module its file already imports at the top."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. Packages on one line are one layer (they may import each other's modules).
LAYERS = [
    ("ablations.model",),
    ("ablations.config",),
    ("ablations.trial",),
    ("ablations.contract",),  # own code's public API: config.code and trial.own_code
    ("ablations.results", "ablations.results.io", "ablations.search_spaces"),  # results' package
    ("ablations.results.stats",),                                            # imports only io
    ("ablations.results.report",),
    # the experiment, by what each part does (docs/architecture.md's layer table, rows 6.0-6.6)
    ("ablations.experiment.core",),  # the request, its groups, the events, the run's options
    ("ablations.experiment.provenance",),  # fingerprints, the trial store, experiment.json
    ("ablations.experiment.planning",),  # a table's cells and trials on each dataset, checks
    ("ablations.experiment.execution",),  # Ray Tune: the runner, the trainable, the tables
    ("ablations.experiment.designs",),  # the run kinds
    ("ablations.experiment.trackers",),  # MLflow, W&B, a tracker of one's own
    ("ablations.experiment",),  # the library: Experiment, prepare, execute, resume, continue
    ("ablations.cli",),
]


def layer_of(module: str) -> int | None:
    import ablations

    lazy = ablations.LAZY  # ablations.Experiment & co: their own module's layer
    if module.startswith("ablations.") and module.split(".")[1] in lazy:
        module = lazy[module.split(".")[1]]
    best, longest = None, -1
    for rank, packages in enumerate(LAYERS):
        for package in packages:
            if (module == package or module.startswith(package + ".")) \
                    and len(package) > longest:  # ablations.experiment.core, not .experiment
                best, longest = rank, len(package)
    return best


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree; each text is parsed once for the module's checks, which only
    read the trees."""
    return _tree(path.read_text(), str(path))


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree (``ast.walk``'s order), walked once for the module's
    checks."""
    return _nodes(path.read_text(), str(path))


@functools.lru_cache(maxsize=None)
def _tree(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename)


@functools.lru_cache(maxsize=None)
def _nodes(text: str, filename: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_tree(text, filename)))


@pytest.fixture(scope="module", autouse=True)
def _forget_the_trees():
    """The trees (about half a million objects) go with the module's last test: kept, every later
    garbage collection of the test worker, an OOM recovery's among them, would walk them."""
    yield
    _nodes.cache_clear()
    _tree.cache_clear()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "ablations":  # model/, results/, search_spaces/ install as ablations.<folder>
        parts.insert(0, "ablations")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports: (line, module); ``from a import b`` counts ``a.b`` too,
    so that importing a subpackage's module by name is seen."""
    found = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def sources() -> list[Path]:
    files = []
    for top in ("model", "ablations", "results", "search_spaces"):
        files += sorted((ROOT / top).rglob("*.py"))
    return [f for f in files if f != ROOT / "ablations" / "__init__.py"]


def violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        own = layer_of(module_name(path))
        if own is None:
            continue
        for line, target in imports(path):
            rank = layer_of(target)
            if rank is not None and rank > own:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target} "
                             f"(layer {rank} > {own})")
    return sorted(set(found))


def test_every_module_imports_only_its_own_layer_or_lower_ones():
    assert violations(sources()) == []


def test_no_relative_imports_hide_from_the_walk():
    relative = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in sources()
                for node in nodes(path)
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert relative == []


def test_the_walk_sees_the_packages_lazy_names_at_their_own_layer():
    assert layer_of("ablations.Experiment") == layer_of("ablations.experiment.api")
    assert layer_of("ablations.train") == layer_of("ablations.trial.loop")


def test_results_are_three_layers_storage_statistics_rendering():
    assert layer_of("ablations.results") == layer_of("ablations.results.io.files") \
        == layer_of("ablations.search_spaces")
    assert layer_of("ablations.trial.loop") < layer_of("ablations.results.io.schema")
    assert layer_of("ablations.results.io.schema") < layer_of("ablations.results.stats.verdicts")
    assert layer_of("ablations.results.stats.verdicts") < layer_of("ablations.results.report.build")
    assert layer_of("ablations.results.report.build") < \
        layer_of("ablations.experiment.execution.runner")


def test_the_walk_sees_an_upward_import_even_inside_a_function(tmp_path, monkeypatch):
    fake = ROOT / "ablations" / "trial" / "_upward_probe.py"
    assert not fake.exists()
    tree_text = "def f():\n    from ablations.experiment.execution.runner import run_experiment\n"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: tree_text)
    found = violations([fake])
    assert found and "imports ablations.experiment.execution.runner" in found[0]


@pytest.mark.slow
def test_the_configuration_layer_loads_no_ray_and_import_ablations_no_torch():
    import subprocess
    import sys

    code = ("import sys, ablations, ablations.config; "
            "from ablations.config import TrialConfig; TrialConfig.of(epochs=2); "
            "print(sorted(m for m in ('ray', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


PROJECT = ("ablations", "results", "search_spaces", "model")


def private_imports(files: list[Path]) -> list[str]:
    """A private name of a project module used outside it: ``from <module> import _name``, or
    ``<module alias>._name`` after ``import a.b as m`` / ``from a import b`` (b a module)."""
    found = []
    for path in files:
        aliases = set()
        for node in nodes(path):
            if isinstance(node, ast.Import):
                aliases |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                            if alias.name.split(".")[0] in PROJECT}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in PROJECT:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from "
                          f"{node.module}" for alias in node.names if _private(alias.name)]
                aliases |= {alias.asname or alias.name for alias in node.names
                            if not alias.name[:1].isupper()}  # modules and functions alike
        for node in nodes(path):
            if isinstance(node, ast.Attribute) and _private(node.attr) \
                    and isinstance(node.value, (ast.Name, ast.Attribute)) \
                    and ast.unparse(node.value).split(".")[0] in aliases:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} uses "
                             f"{ast.unparse(node)}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names():
    tests = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    assert private_imports(sources() + tests) == []


FORBIDDEN = {"argparse", "os._exit", "sys.exit", "signal.signal", "os.environ",
             "os.environ.setdefault", "os.environ.update", "os.environ.pop", "os.putenv",
             "os.unsetenv", "SystemExit", "os.chdir"}


def process_wide(files: list[Path]) -> list[str]:
    """What only the command line may do: parse flags, exit, install signal handlers, change
    the process's environment or working directory."""
    found = []
    for path in files:
        for node in nodes(path):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call):
                names = [ast.unparse(node.func)]
            elif isinstance(node, ast.Raise) and node.exc is not None:
                names = [ast.unparse(node.exc).split("(")[0]]
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
                    else [node.target]
                names = [ast.unparse(t.value) for t in targets if isinstance(t, ast.Subscript)]
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names
                      if name in FORBIDDEN]
    return found


# Programs of their own that ship in the package, run as separate processes: a program may
# exit and handle its signals (the supervisor of a command's process tree)
PROGRAMS = {ROOT / "ablations" / "trial" / "supervise.py"}


def library_sources() -> list[Path]:
    """The modules below the command line (``ablations/`` less ``cli/`` and the programs)."""
    return [f for f in sources()
            if f.is_relative_to(ROOT / "ablations") and not f.is_relative_to(
                ROOT / "ablations" / "cli") and f not in PROGRAMS]


def test_the_library_layers_parse_no_flags_exit_no_process_and_leave_signals_and_env_alone():
    library = library_sources()
    assert library and process_wide(library) == []


PRINTS = {"print", "sys.stdout.write", "sys.stderr.write", "pprint", "pprint.pprint"}


def printing(files: list[Path]) -> list[str]:
    """Where a module writes to the console itself (``print``, ``sys.stdout.write``, ...):
    only the command line may; the library emits events and raises errors."""
    return [f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}"
            for path in files for node in nodes(path)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in PRINTS]


def test_the_library_prints_nothing_the_command_line_alone_does():
    library = library_sources()
    assert library and printing(library) == []


@pytest.mark.parametrize("text", ["print('x')\n", "import sys\nsys.stderr.write('x')\n",
                                  "import sys\nprint('x', file=sys.stderr)\n"])
def test_the_print_check_sees_each_form(monkeypatch, text):
    probe = ROOT / "ablations" / "experiment" / "_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text)
    assert printing([probe]), text


@pytest.mark.parametrize("text", [
    "from ablations.trial.loop import _hidden\n",
    "import ablations.trial.memory as m\nm._hidden(1)\n",
    "from ablations.trial import memory\nmemory._hidden\n",
])
def test_the_private_check_sees_each_form(monkeypatch, text):
    probe = ROOT / "ablations" / "experiment" / "_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text)
    assert private_imports([probe]), text


@pytest.mark.parametrize("text", [
    "import os\nos._exit(1)\n", "from os import _exit\n", "from argparse import Namespace\n",
    "import sys\nsys.exit(2)\n", "raise SystemExit(2)\n", "from signal import signal\n",
    "import os\nos.environ['X'] = '1'\n", "import os\nos.environ.setdefault('X', '1')\n",
    "import os\nos.environ.pop('X')\n", "import os\ndel os.environ['X']\n",
    "import os\nos.chdir('/')\n",
])
def test_the_process_check_sees_each_form(monkeypatch, text):
    probe = ROOT / "ablations" / "experiment" / "_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text)
    assert process_wide([probe]), text


def fresh_stdout(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (nothing imported before it)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
def test_the_packages_public_names_load_their_layer_and_no_other_path_resolves():
    code = ("import importlib, ablations\nfrom ablations import Experiment, TrialOutcome, train\n"
            "assert callable(train) and Experiment.__module__ == 'ablations.experiment.api'\n"
            "try:\n    importlib.import_module('ablations.trainable')\n"
            "except ModuleNotFoundError:\n    print('gone')\n")
    assert fresh_stdout(code) == "gone"


@pytest.mark.slow
def test_planning_a_grid_loads_no_ray_and_no_design_analysis():
    code = ("import sys\nfrom ablations.experiment.prepare import prepare\n"
            "from ablations.experiment.core.request import Request\n"
            "prepare(Request(only=['baseline', 'no_images']))\n"
            "print(sorted(m for m in ('ray', 'ray.tune', 'ablations.results.stats.factorial',\n"
            "                         'scipy.stats') if m in sys.modules))\n")
    assert fresh_stdout(code) == "[]"


@pytest.mark.slow
def test_planning_a_factorial_loads_its_design_not_its_analysis():
    code = ("import sys\nfrom ablations.experiment.prepare import prepare\n"
            "from ablations.experiment.core.request import Request\n"
            "from ablations.experiment.core.design_options import Factorial\n"
            "prepare(Request(design=Factorial("
            "factors=['temporal_attention', 'spatial_attention']),"
            " seeds=[0, 1]))\n"
            "print(sorted(m for m in ('ray', 'ablations.results.stats.factorial',\n"
            "                         'ablations.results.stats.factorial_design')"
            " if m in sys.modules))\n")
    assert fresh_stdout(code) == "['ablations.results.stats.factorial_design']"


@pytest.mark.slow
def test_the_modules_that_end_a_run_load_no_matplotlib():
    """What a run's driver imports to end a run (the CLI's run command, the results, the
    design's verdicts, a multi-dataset run's across-datasets file) leaves matplotlib to the
    reports that draw figures (docs/benchmarks.md, the driver's CPU)."""
    code = ("import sys\nimport ablations.cli.run, ablations.experiment.api\n"
            "from ablations.results.report.designs import report_of\n"
            "from ablations.results.report.datasets_report import write_across\n"
            "from ablations.results.stats.analyses import analysis_of\n"
            "from ablations.results.stats import decisions\n"
            "print(sorted(m for m in ('matplotlib', 'ablations.results.report.plots')"
            " if m in sys.modules))\n")
    assert fresh_stdout(code) == "[]"


# The import graph: one node per module (a package is its __init__), an edge for every import
# of a project module, at the top of a file or inside a function. ``from a import b`` is an
# edge to the module a.b when b is a module, else to a.
def project_modules() -> dict[str, Path]:
    files = []
    for top in ("model", "ablations", "results", "search_spaces"):
        files += sorted((ROOT / top).rglob("*.py"))
    return {module_name(path): path for path in files}


def import_targets(node: ast.Import | ast.ImportFrom, known) -> list[str]:
    """The project modules an import statement loads (its own, not its parent packages)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.module and node.level == 0:
        names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known
                 else node.module for alias in node.names]
    else:
        return []
    found = []
    for name in names:
        while name and name not in known:  # `import a.b.c` of a function c: the module a.b
            name = name.rpartition(".")[0]
        if name and name not in found:
            found.append(name)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for node in nodes(path)
                       if isinstance(node, (ast.Import, ast.ImportFrom))
                       for target in import_targets(node, modules) if target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import(monkeypatch):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}) == [
        ["a", "b", "c"]]
    modules = project_modules()
    text = {"ablations.trial.loop": "import ablations.experiment.execution.runner.run_experiment\n",
            "ablations.experiment.execution.runner":
                "def f():\n    from ablations.trial import loop\n"}
    by_path = {modules[name]: source for name, source in text.items()}
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: by_path[self])
    graph = import_graph({name: modules[name] for name in text})
    assert graph == {"ablations.trial.loop": {"ablations.experiment.execution.runner"},
                     "ablations.experiment.execution.runner": {"ablations.trial.loop"}}
    assert cycles(graph) == [["ablations.experiment.execution.runner", "ablations.trial.loop"]]


def test_no_import_cycles_between_modules():
    found = cycles(import_graph(project_modules()))
    assert found == [], "\n".join(" <-> ".join(component) for component in found)


def function_level_repeats(modules: dict[str, Path]) -> list[str]:
    """Function-level imports of a project module the same file imports at its top (outside
    ``if TYPE_CHECKING:``): the module is loaded already, so the import belongs at the top."""
    found = []
    for name, path in modules.items():
        tree = parsed(path)
        top, inner = set(), []

        def walk(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    targets = import_targets(child, modules)
                    if in_function:
                        inner.extend((child.lineno, target) for target in targets)
                    else:
                        top.update(targets)
                walk(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        walk(tree, False)
        found += [f"{path.relative_to(ROOT)}:{line} imports {target} inside a function, and "
                  f"at the top" for line, target in inner if target in top]
    return sorted(found)


def test_no_function_level_import_of_a_module_the_file_imports_at_its_top():
    assert function_level_repeats(project_modules()) == []


def test_the_repeat_check_sees_a_function_level_import_of_a_top_level_module(monkeypatch):
    modules = project_modules()
    probe = modules["ablations.experiment.execution.runner"]
    text = ("from ablations.results.io.files import TRIALS_FILE\n"
            "if TYPE_CHECKING:\n    import ablations.results.stats.verdicts\n"
            "def f():\n    from ablations.results.io.files import read_experiment\n"
            "    import ablations.results.stats.verdicts\n")
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == probe else "")
    assert function_level_repeats(modules) == [
        "ablations/experiment/execution/runner.py:5 imports ablations.results.io.files inside a "
        "function, and at the top"]


def test_pyproject_installs_every_package_under_the_one_import_root():
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = sorted(module_name(init) for top in ("ablations", "model", "results",
                                                   "search_spaces")
                     for init in (ROOT / top).rglob("__init__.py"))
    assert sorted(setuptools["packages"]) == folders
    assert all(package.split(".")[0] == "ablations" for package in setuptools["packages"])
    assert setuptools["package-dir"] == {f"ablations.{top}": top
                                         for top in ("model", "results", "search_spaces")}


# Where a design's record in experiment.json is read: the designs (the run side), their
# analyses (the results side) and the report's side of each. Anywhere else a read of one is a
# branch on the run kind that a new design would have to add to.
DESIGN_SIDES = (ROOT / "ablations" / "experiment" / "designs",
                ROOT / "results" / "stats" / "analyses.py",
                *sorted((ROOT / "results" / "stats").glob("analysis_*.py")),  # each design's
                ROOT / "results" / "report" / "designs.py")
# The same words in other roles: the verdict table's attrs (a table decided at looks), a
# tuned ablation's two evaluations' labels.
OTHER_ROLES = {("results/report/tables.py", "sequential"),
               ("results/report/paper.py", "sequential"), ("results/stats/tuned.py", "tuned")}


def record_keys() -> set[str]:
    from ablations.experiment.designs.records import RECORDED
    from ablations.results.io.files import DESIGN_PLUGIN_KEY
    from ablations.results.stats.analyses import ANALYSES

    return ({design.record_key for design in RECORDED}
            | {analysis.record_key for analysis in ANALYSES.values() if analysis.record_key}
            | {DESIGN_PLUGIN_KEY})


def design_record_reads(files: list[Path], keys: set[str]) -> list[str]:
    """Reads of a design's record outside the designs' sides: ``x.get(KEY)``, ``x[KEY]``,
    ``KEY in x``, with KEY a record key."""
    found = []
    for path in files:
        if any(path == side or side in path.parents for side in DESIGN_SIDES):
            continue
        where = str(path.relative_to(ROOT))
        for node in nodes(path):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and node.args \
                    and isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                    and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                key = node.left.value
            if key in keys and (where, key) not in OTHER_ROLES:
                found.append(f"{where}:{node.lineno} reads {key!r}")
    return found


def test_only_the_designs_read_their_records_in_experiment_json():
    keys = record_keys()
    assert {"rounds", "factorial", "tuned", "search", "design_plugin"} <= keys
    assert design_record_reads(sources(), keys) == []


@pytest.mark.parametrize("text", [
    "def f(meta):\n    return meta.get('factorial')\n", "def f(meta):\n    return meta['search']\n",
    "def f(meta):\n    return 'rounds' in meta\n",
])
def test_the_design_record_check_sees_each_form(monkeypatch, text):
    probe = ROOT / "ablations" / "experiment" / "_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text)
    assert design_record_reads([probe], record_keys()), text


# The library's modules at the experiment's root, above its parts: a module that is none of
# them belongs in the part that does what it does
EXPERIMENT_ROOT = {"api", "execute", "prepare", "resuming", "continuing", "continuation_hint"}


def test_the_experiment_is_in_parts_each_a_layer_and_its_root_the_library():
    parts = ["core.request", "provenance.trial_store", "planning.table_plan", "execution.runner",
             "designs.base", "trackers.specs", "api"]
    ranks = [layer_of(f"ablations.experiment.{part}") for part in parts]
    assert ranks == sorted(set(ranks)), dict(zip(parts, ranks))
    assert layer_of("ablations.results.report.build") < ranks[0] < ranks[-1] \
        < layer_of("ablations.cli.main")
    root = ROOT / "ablations" / "experiment"
    assert {path.stem for path in root.glob("*.py")} - {"__init__"} == EXPERIMENT_ROOT
