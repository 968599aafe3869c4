"""How a key's value is written on a command line: in the form the program parses.

Programs read their flags in different languages. argparse's ``type=float`` and most YAML or
JSON configurators read ``0.1``, ``true`` and ``null``; a configurator that evaluates Python
literals (``ast.literal_eval``, as nanoGPT's ``configurator.py`` does, asserting the type
against the default) needs ``False``, ``None`` and ``'text'``; a Hydra app's overrides need
Hydra's grammar, where ``,`` ``=`` ``[`` and spaces are quoted and a text that reads as a number
or a boolean is quoted to stay a text. A command's space file names the form, for every key
(``values: python``) or per key (``values: {bias: python}``; the others ``yaml``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ablations.config.values import ConfigError

FORMS = ("yaml", "python", "hydra")
DEFAULT_FORM = "yaml"
# a Hydra override's value that needs no quotes: no whitespace nor any of ,=[]{}()'"\ and
# not a text Hydra would read as another type (a number, a boolean, null)
_HYDRA_PLAIN = re.compile(r"[A-Za-z_/.:@~+\-][\w/.:@~+\-]*")
_HYDRA_TYPED = re.compile(r"(?i)(true|false|null|[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?|"
                          r"[-+]?(inf|nan))")


def written(value: Any, form: str = DEFAULT_FORM) -> str:
    """``value`` as a program that parses ``form`` reads it back as the same value: a list or
    a mapping as the form writes one (YAML's flow style as JSON writes it, which YAML and JSON
    readers both take; Python's literal; Hydra's ``[a,b]`` and ``{k:v}``), its items each in
    the form."""
    if form == "python":
        return repr(value)
    if isinstance(value, (list, tuple, Mapping)):
        if form == "hydra":
            if isinstance(value, Mapping):
                return "{" + ",".join(f"{key}:{written(item, form)}"
                                      for key, item in value.items()) + "}"
            return "[" + ",".join(written(item, form) for item in value) + "]"
        return json.dumps(value, allow_nan=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if form == "hydra" and isinstance(value, str):
        if _HYDRA_PLAIN.fullmatch(value) and not _HYDRA_TYPED.fullmatch(value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def value_forms(declared: Any, keys: Mapping[str, Any], *, source: str) -> dict[str, str]:
    """Each key's form from a space file's ``values:``: one form for every key, or a mapping
    of key to form (the others :data:`DEFAULT_FORM`); only the keys whose form is not the
    default are kept.

    Raises:
        ConfigError: a form that is not one of :data:`FORMS`, or a key that is not a config key.
    """
    hint = f"give one of {', '.join(FORMS)} (e.g. values: python, or values: {{bias: python}})"
    if declared is None:
        return {}
    if isinstance(declared, str):
        declared = {key: declared for key in keys}
    if not isinstance(declared, Mapping):
        raise ConfigError(f"{source}: values: {declared!r} is not a form; {hint}")
    forms = {}
    for key, form in declared.items():
        if key not in keys:
            raise ConfigError(f"{source}: values: {key!r} is not a config key; name one of "
                              f"{', '.join(keys) or 'the config keys'}")
        if form not in FORMS:
            raise ConfigError(f"{source}: values: {key}: {form!r} is not a form; {hint}")
        if form != DEFAULT_FORM:
            forms[str(key)] = str(form)
    return forms


__all__ = ["DEFAULT_FORM", "FORMS", "value_forms", "written"]
