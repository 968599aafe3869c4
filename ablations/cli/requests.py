"""The command line's flags as the library's :class:`~ablations.experiment.core.request.Request`:
comma-separated lists split, and the fields the command gave (``Request.given``): the run
flags that are Request fields leave nothing in the parsed namespace unless given
(``flags.given_only``), so what is there is what the command said."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ablations.experiment.core.design_options import BUILT_IN_OPTIONS, options_from
from ablations.experiment.core.request import Request, given_names

LISTS = ("only",)  # Request fields whose flags take NAME,NAME,... (a design's: options_from)


def comma_list(text: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; None (not given) stays None. Empty items are kept as
    empty names, so that the request's check names them."""
    return None if text is None else [part.strip() for part in str(text).split(",")]


def request_from(args: argparse.Namespace) -> Request:
    """The Request of a parsed ``run`` command: each field from the flag of the same dest,
    given where the command gave it, the Request's default elsewhere. ``args`` then holds
    every field's value (the rest of the command line reads them there)."""
    values = {f.name: getattr(args, f.name) for f in fields(Request) if hasattr(args, f.name)}
    for name in LISTS:
        if name in values:
            values[name] = comma_list(values[name])
    values["design"] = design_from(args)
    if values["design"] is None:
        values.pop("design")
    given = set(given_names(values, values.get("design")))
    data = values.get("data")
    if data is not None:  # --data repeated, or one named: datasets (docs/datasets.md)
        several = len(data) > 1 or "=" in data[0] or data[0] == "synthetic"
        values["data"], values["datasets"] = (None, data) if several else (data[0], None)
        if several:
            given = (given - {"data"}) | {"datasets"}
    request = Request(**values, given=frozenset(given))
    for field in fields(Request):
        if field.name != "given":
            setattr(args, field.name, getattr(request, field.name))
    return request


def design_from(args: argparse.Namespace) -> object:
    """The design the flags ask for (:func:`~ablations.experiment.core.design_options.
    options_from` of ``--design`` and the designs' option flags given; a design of one's own
    with options: ``args.own_options``, its options class, which the parser's flags came
    from)."""
    own = getattr(args, "own_options", None)
    flags = {flag.dest for options in (*BUILT_IN_OPTIONS, *([own] if own else []))
             for flag in options.flags}
    return options_from(getattr(args, "design", "table"),
                        {name: getattr(args, name) for name in flags if hasattr(args, name)},
                        split=comma_list, own=own)
