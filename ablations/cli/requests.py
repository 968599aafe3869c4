"""The command line's flags as the library's :class:`~ablations.experiment.request.Request`:
comma-separated lists split, and the fields whose flags the command gave (``Request.given``),
read from the command itself rather than guessed from defaults."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Sequence

from ablations.experiment.request import Request

LISTS = ("only", "factors", "tune_each")  # flags that take KEY,KEY,... and fields that are lists


def comma_list(text: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; None (not given) stays None. Empty items are kept as
    empty names, so that the request's check names them."""
    return None if text is None else [part.strip() for part in str(text).split(",")]


def option_dests(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option string of ``parser`` and of its subcommands' parsers -> its dest."""
    found: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(option_dests(sub))
        for option in action.option_strings:
            found[option] = action.dest
    return found


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests of the options ``argv`` names, as argparse reads them: ``--flag``,
    ``--flag=value`` and an unambiguous prefix of a long option."""
    options = option_dests(parser)
    given = set()
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        option = token.split("=", 1)[0]
        matches = [o for o in options if o == option] or \
            [o for o in options if o.startswith(option)]
        if len({options[o] for o in matches}) == 1:
            given.add(options[matches[0]])
    return given


def request_from(args: argparse.Namespace, parser: argparse.ArgumentParser,
                 argv: Sequence[str]) -> Request:
    """The Request of a parsed command: each field from the flag of the same dest."""
    values = {f.name: getattr(args, f.name) for f in fields(Request) if hasattr(args, f.name)}
    for name in LISTS:
        values[name] = comma_list(values.get(name))
    data = values.get("data")
    if data is not None:  # --data repeated, or one named: datasets (docs/datasets.md)
        several = len(data) > 1 or "=" in data[0] or data[0] == "synthetic"
        values["data"], values["datasets"] = (None, data) if several else (data[0], None)
    names = {f.name for f in fields(Request)}
    given = given_dests(parser, argv)
    if values.get("datasets") is not None:
        given = (given - {"data"}) | {"datasets"}
    values["given"] = frozenset(given & names)
    return Request(**values)
