"""A key's value written on the command line in the form its program parses
(ablations/config/value_forms.py): YAML's, Python literals, Hydra overrides; each read back by
the parser it names is the same value."""

from __future__ import annotations

import ast
import textwrap

import pytest
import yaml

from ablations.config import ConfigError
from ablations.config.code import command_from, command_of, command_spec
from ablations.config.plugins import PluginError, plugin_config
from ablations.config.value_forms import written
from search_spaces.files import load_space_file

VALUES = [True, False, None, 0, -3, 0.1, 1e-4, "shakespeare", "a b", "1.5", "true", "it's",
          "x,y=z[0]"]


@pytest.mark.parametrize("value", VALUES)
def test_a_python_literal_reads_back_as_the_same_value_and_type(value):
    back = ast.literal_eval(written(value, "python"))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value", [v for v in VALUES if not isinstance(v, str)] + ["text"])
def test_yaml_reads_back_the_same_value(value):
    assert yaml.safe_load(written(value, "yaml")) == value


@pytest.mark.parametrize("value, shown", [
    (True, "true"), (None, "null"), (0.1, "0.1"), ("shakespeare", "shakespeare"),
    ("data/train.txt", "data/train.txt"), ("a b", "'a b'"), ("x,y", "'x,y'"),
    ("k=v", "'k=v'"), ("[1]", "'[1]'"), ("1.5", "'1.5'"), ("true", "'true'"),
    ("null", "'null'"), ("it's", r"'it\'s'"), ("back\\slash", r"'back\\slash'"),
])
def test_a_hydra_override_quotes_what_its_grammar_would_split_or_retype(value, shown):
    assert written(value, "hydra") == shown


LISTS = [[8, 16], [], [True, None, 0.5], ["a b", "x,y", "1.5"], {"lr": 0.1, "name": "a b"},
         {"widths": [8, 16]}]


@pytest.mark.parametrize("value", LISTS)
@pytest.mark.parametrize("form", ["yaml", "python"])
def test_a_list_or_mapping_reads_back_as_itself(value, form):
    text = written(value, form)
    assert (yaml.safe_load(text) if form == "yaml" else ast.literal_eval(text)) == value


@pytest.mark.parametrize("value", VALUES + LISTS)
def test_hydras_own_parser_reads_each_override_back_as_the_value(value):
    """Hydra's override grammar as Hydra itself parses it (its OverridesParser, what
    ``@hydra.main`` runs on the command line's overrides)."""
    parser = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    override = parser.OverridesParser.create().parse_override(f"key={written(value, 'hydra')}")
    back = override.value()
    assert back == value, (written(value, "hydra"), back)


def test_the_form_is_given_for_every_key_or_per_key_and_travels_in_the_spec():
    every = command_from("python t.py --bias={bias} --n={n}", {"bias": True, "n": 2},
                         {"loss": "lower"}, values="python")
    assert every.forms == {"bias": "python", "n": "python"}
    one = command_from("python t.py --bias={bias} --n={n}", {"bias": True, "n": 2},
                       {"loss": "lower"}, values={"bias": "python", "n": "yaml"})
    assert one.forms == {"bias": "python"}
    assert command_of(command_spec(one)).forms == {"bias": "python"}
    plain = command_from("python t.py --n={n}", {"n": 2}, {"loss": "lower"})
    assert '"values"' not in command_spec(plain)  # a spec without forms stays as it was


@pytest.mark.parametrize("values, problem", [
    ("toml", "values: bias: 'toml' is not a form; give one of yaml, python, hydra"),
    ({"dropout": "python"}, "values: 'dropout' is not a config key; name one of bias"),
    (["python"], "values: ['python'] is not a form"),
])
def test_a_bad_form_is_refused_in_one_line(values, problem):
    with pytest.raises(ConfigError) as error:
        command_from("python t.py --bias={bias}", {"bias": True}, {"loss": "lower"},
                     values=values)
    assert problem in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("key, fix", [
    ("model", "config: {arch: ...} and --model {arch} on the command line"),
    ("dataset", "config: {data_name: ...} and --dataset {data_name} on the command line"),
])
def test_a_key_the_runner_takes_is_refused_naming_the_flag_that_keeps_its_name(key, fix):
    with pytest.raises(ConfigError) as error:
        command_from(f"python t.py --{key} {{{key}}}", {key: "x"}, {"loss": "lower"})
    assert "name the key otherwise and keep the program's flag: " + fix in str(error.value)


# nanoGPT's configurator.py: each --key=value evaluated as a Python literal, its type asserted
# against the default's (the text kept where it is no literal)
CONFIGURATOR = '''
import json
import sys
from ast import literal_eval

bias = True
dataset = "shakespeare"
dropout = 0.0
for arg in sys.argv[1:]:
    key, val = arg[2:].split("=", 1)
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) == type(globals()[key]), (key, attempt)
    globals()[key] = attempt
loss = 1.0 + (0.0 if bias else 0.25) + dropout
print(json.dumps({"loss": loss, "bias_seen": float(bias)}))
'''


@pytest.mark.slow  # trains through the command line, on the test worker's shared Ray
def test_a_python_literal_configurator_is_ablated_on_a_boolean_unedited(tmp_path):
    from tests.conftest import run_here
    import pandas as pd

    (tmp_path / "train.py").write_text(CONFIGURATOR.lstrip())
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""
        command: "{python} train.py --bias={bias} --dataset={data_name} --dropout={dropout}"
        config: {bias: true, data_name: shakespeare, dropout: 0.0}
        values: python
        metrics: {loss: lower}
        variants: {baseline: {}, no_bias: {bias: false}}
        """).lstrip())
    run = run_here("--space", "space.yaml", "--seeds", "2", "--no-dashboard", "--storage",
                   str(tmp_path), "--name", "lit", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "lit" / "trials.parquet")
    assert (trials["status"] == "ok").all(), trials["error"].tolist()
    seen = trials.groupby("ablation")["bias_seen"].agg(set).to_dict()
    assert seen == {"baseline": {1.0}, "no_bias": {0.0}}


def test_a_list_key_is_typed_from_the_space_file_and_each_variant_like_its_default(tmp_path):
    """``widths: [8, 16]`` in a space file (YAML read as text) is a list of integers, and a
    variant's list (or its text, as ``--set`` gives it) takes the same item type."""
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""
        command: "{python} t.py model.widths={widths} opt={opt}"
        config: {widths: [8, 16], opt: {lr: 0.1, nesterov: true}}
        values: hydra
        metrics: {loss: lower}
        variants: {baseline: {}, wide: {widths: [32, 64]}}
        """))
    table = load_space_file(tmp_path / "space.yaml")
    assert command_of(table["model"]).defaults == {"widths": [8, 16],
                                                    "opt": {"lr": 0.1, "nesterov": True}}
    wide = plugin_config(table["model"], table["variants"]["wide"])
    assert wide.widths == [32, 64] and wide.opt == {"lr": 0.1, "nesterov": True}
    assert plugin_config(table["model"], {"widths": "[4, 2]"}).widths == [4, 2]
    assert plugin_config(table["model"], {"opt": {"nesterov": "false"}}).opt == {
        "nesterov": False}
    with pytest.raises(PluginError, match=r"widths='x' is not a list, as its default \[8, 16\]"):
        plugin_config(table["model"], {"widths": "x"})
    with pytest.raises(PluginError, match=r"widths=\['a'\] is not a list"):
        plugin_config(table["model"], {"widths": ["a"]})
