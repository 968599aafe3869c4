"""benchmarks/suite_time.py's before/after table, read from two pytest logs of the kind
``--durations=0 --durations-min=0`` prints (and ``--save`` keeps, with the Ray starts)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BEFORE = """\
============================= slowest durations ==============================
30.00s call     tests/test_a.py::test_one
10.00s setup    tests/test_a.py::test_one
20.00s call     tests/test_b.py::test_two[x]
4.00s call     tests/test_unit.py::test_quick
===== 3 passed in 40.00s =====
local Ray starts: 8
"""
AFTER = """\
============================= slowest durations ==============================
10.00s call     tests/test_a.py::test_one
5.00s call     tests/test_b.py::test_two[x]
5.00s teardown tests/test_b.py::test_two[x]
4.00s call     tests/test_unit.py::test_quick
===== 3 passed in 16.00s =====
local Ray starts: 2
"""


def suite_time():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import suite_time
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return suite_time


def rows(table: str) -> dict[str, list[str]]:
    cells = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in table.splitlines()[2:]]
    return {row[0]: row[1:] for row in cells}


def test_the_before_after_table_adds_each_tests_phases_and_gives_each_ratio():
    module = suite_time()
    slow = {"tests/test_a.py::test_one", "tests/test_b.py::test_two[x]"}
    table, slowest = module.compared(BEFORE, AFTER, slow)
    found = rows(table)
    assert found["pytest's seconds"] == ["40", "16", "0.40"]
    assert found["worker-s in all"] == ["64", "24", "0.38"]  # setup, call, teardown added
    assert found["worker-s: other tests marked slow"] == ["60", "20", "0.33"]
    assert found["worker-s: unit (not slow)"] == ["4", "4", "1.00"]
    assert found["local Ray starts"] == ["8", "2", "0.25"]
    units = rows(slowest)
    assert list(units) == ["tests/test_a.py", "tests/test_b.py", "tests/test_unit.py"]
    assert units["tests/test_a.py"] == ["40", "10", "0.25"]


def test_a_log_without_the_ray_starts_line_shows_them_as_unknown():
    module = suite_time()
    table, _ = module.compared(BEFORE.replace("local Ray starts: 8\n", ""), AFTER, set())
    assert rows(table)["local Ray starts"] == ["-", "2", "-"]


def test_a_saved_logs_kinds_are_the_tests_it_names_as_slow_not_this_checkouts():
    module = suite_time()
    here = {"tests/test_a.py::test_one", "tests/test_b.py::test_two[x]"}  # as AFTER's
    before = module.saved(BEFORE, 8, {"tests/test_a.py::test_one"})  # test_b unmarked then
    found = rows(module.compared(before, AFTER, here)[0])
    assert found["worker-s: other tests marked slow"] == ["40", "20", "0.50"]
    assert found["worker-s: unit (not slow)"] == ["24", "4", "0.17"]
    assert found["local Ray starts"] == ["8", "2", "0.25"]
