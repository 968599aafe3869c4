"""Every simulation command the docs quote (`python -m tools.<module> N ...`) runs as quoted,
at a tiny size: each is found in the docs, run in this process with its experiment count
replaced, and must print its table. (The browser check is run by the report's tests.)"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUOTED = re.compile(r"python -m (tools\.\w+)((?: [\w.]+)*)")
SKIPPED = {"tools.browser_check"}  # needs Chromium and a report: tests/test_report_readable.py
SLOW = {"tools.datasets_simulation"}  # 20 s an experiment on 2 busy cores
SIZE = {"tools.datasets_simulation": "2"}  # its experiments; every other command's: 10


def quoted_commands() -> list[tuple[str, tuple[str, ...]]]:
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for module, args in QUOTED.findall(page.read_text()):
            if module not in SKIPPED:
                found.add((module, tuple(args.split())))
    return sorted(found)


def tiny(module: str, args: tuple[str, ...]) -> list[str]:
    """The quoted arguments with every count replaced by a small one."""
    return [SIZE.get(module, "10") if arg.isdigit() else arg for arg in args]


COMMANDS = quoted_commands()


def test_the_docs_quote_the_simulations():
    modules = {module for module, _ in COMMANDS}
    assert {"tools.simulation", "tools.workflow_simulation", "tools.failure_simulation",
            "tools.crossed_simulation", "tools.datasets_simulation"} <= modules, modules


@pytest.mark.parametrize("module, args", [
    pytest.param(module, args, marks=[pytest.mark.slow] if module in SLOW else [],
                 id=" ".join([module, *args])) for module, args in COMMANDS])
def test_a_quoted_simulation_command_runs_and_prints_its_table(module, args, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(sys, "argv", [module, *tiny(module, args)])
    runpy.run_module(module, run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"^\|.*\|$", out, flags=re.M), out[-2000:]  # a Markdown table's row
