"""The test workers' units (tests/conftest.py): a file whose tests share a module-scoped
fixture is one unit, a test of a SPLIT_FILES file is a unit of its own, the units go out
longest first by the recorded seconds, and a split test that shares a fixture is refused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import REPO, SPLIT_FILES, work_unit


class Item(SimpleNamespace):
    """What the ordering reads of a collected test: its id, its fixtures' scopes, its marks."""

    def __init__(self, nodeid: str, *, scopes: dict[str, str] | None = None, slow=False):
        defs = {name: [SimpleNamespace(scope=scope)] for name, scope in (scopes or {}).items()}
        super().__init__(nodeid=nodeid, _fixtureinfo=SimpleNamespace(name2fixturedefs=defs),
                         slow=slow)

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None


def test_every_split_file_exists_and_is_split_per_test():
    for path in SPLIT_FILES:
        assert (REPO / path).is_file(), f"{path} is in SPLIT_FILES but does not exist"
        assert work_unit(f"{path}::test_x[a::b]") == f"{path}::test_x[a::b]"
    assert work_unit("tests/test_cli.py::test_x") == "tests/test_cli.py"


def test_units_go_out_longest_first_and_each_file_unit_stays_together(tmp_path, monkeypatch):
    split = sorted(SPLIT_FILES)[0]
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/test_b.py": 5.0, f"{split}::test_long": 50.0}))
    monkeypatch.setattr(conftest, "DURATIONS", durations)
    items = [Item("tests/test_a.py::one", scopes={"run": "module"}),  # 2 x 0.2 s, unrecorded
             Item("tests/test_b.py::one"), Item(f"{split}::test_short", slow=True),  # 20 s
             Item("tests/test_a.py::two"), Item(f"{split}::test_long", slow=True),
             Item("tests/test_b.py::two")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == [
        f"{split}::test_long", f"{split}::test_short", "tests/test_b.py::one",
        "tests/test_b.py::two", "tests/test_a.py::one", "tests/test_a.py::two"]


def test_a_split_test_that_shares_a_module_fixture_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "DURATIONS", tmp_path / "none.json")
    split = sorted(SPLIT_FILES)[0]
    items = [Item(f"{split}::test_x", scopes={"tmp_path": "function", "trained": "module"})]
    with pytest.raises(pytest.UsageError, match="module-scoped fixture trained"):
        conftest.pytest_collection_modifyitems(None, items)
