"""Own code's contract without Ray: declared metrics, keys, a command in a space file, the
metric the verdicts use, directions and units, and what run_trial turns a function's
reports into (docs/own-code.md)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import pandas as pd
import pytest
import torch

from ablations.config import ConfigError, TrialConfig
from ablations.config.code import TrainingFunction, command_from, command_spec
from ablations.config.metrics import Metric, parse_metrics
from ablations.config.plugins import held_like
from ablations.experiment.prepare import prepare
from ablations.experiment.core.request import Request, UsageError
from ablations.trial.own_code import OwnCodeError, Trial
from ablations.trial.run import run_trial
from ablations.results.io.directions import metric_direction, metric_of
from ablations.results.report.formatting import unit_of


@dataclass(frozen=True)
class ToyConfig:
    lr: float = 0.1  # the runner has an lr too: own code's keys are its own
    epochs: int = 3
    width: int = 4
    explode: bool = False
    forget: bool = False  # return no test_score


def toy_fit(config, trial):
    trial.seed_everything()
    state = trial.restore() or {"w": torch.zeros(())}
    w = state["w"]
    for epoch in range(trial.start_epoch + 1, config.epochs + 1):
        w = w + config.lr * torch.rand((), generator=trial.generator("order"))
        trial.report(epoch=epoch, val_score=math.inf if config.explode else float(w))
        trial.save({"w": w})
    trial.predictions(pd.DataFrame({"target": [1.0, 2.0], "pred": [1.1, 1.9]}))
    return {} if config.forget else {"test_score": float(w) * config.width}


TOY = TrainingFunction(name="toy", config=ToyConfig, fit=toy_fit,
                       metrics={"test_score": "higher points", "val_score": "higher"})
SPEC = f"{__name__}:TOY"


def run(config: TrialConfig, saved=None, tmp_path=None):
    sent, stored = [], []
    result = run_trial(config, name="baseline-seed0",
                          send=lambda m, final, p: sent.append((m, final, p)),
                          store=stored.append, saved=saved, folder=tmp_path,
                          device=torch.device("cpu"), resources={"CPU": 1})
    return result, sent, stored


def test_metrics_are_declared_with_a_direction_and_an_optional_unit():
    metrics = parse_metrics({"acc": "higher", "loss": "lower nats",
                             "err": {"direction": "lower", "unit": "km"},
                             "m": Metric("m", "higher")})
    assert list(metrics.values()) == [
        Metric("acc", "higher"), Metric("loss", "lower", "nats"), Metric("err", "lower", "km"),
        Metric("m", "higher")]
    assert parse_metrics([Metric("acc", "higher"), Metric("loss", "lower", "nats")]) == {
        "acc": Metric("acc", "higher"), "loss": Metric("loss", "lower", "nats")}
    with pytest.raises(ConfigError, match="'up'"):
        parse_metrics({"acc": "up"})
    with pytest.raises(ConfigError, match="at least one metric"):
        parse_metrics({})
    with pytest.raises(ConfigError, match="no direction"):
        parse_metrics([Metric("acc", None)])
    with pytest.raises(ConfigError, match="Metric named 'm' under the name 'acc'"):
        parse_metrics({"acc": Metric("m", "higher")})
    with pytest.raises(ConfigError, match="declared twice"):
        parse_metrics([Metric("acc", "higher"), Metric("acc", "lower")])
    with pytest.raises(ConfigError, match=r"Metric\(name, direction, unit\)"):
        Metric("lower", "nats")  # the name comes first


def test_own_codes_keys_are_its_own_even_where_the_runner_has_one_of_the_same_name():
    config = TrialConfig.of(model=SPEC, lr=0.5, epochs=7)
    assert (config.model.lr, config.model.epochs) == (0.5, 7)
    assert config.optim.lr == TrialConfig().optim.lr  # the runner's own lr is untouched
    row = config.flat()
    assert row["lr"] == 0.5 and "batch_size" not in row and "cnn_widths" not in row
    with pytest.raises(ConfigError, match="widht"):
        TrialConfig.of(model=SPEC, widht=3)


def test_a_command_carries_its_line_defaults_and_metrics_to_the_workers():
    command = command_from("python train.py --lr {lr} --seed {seed}", {"lr": 0.1},
                           {"test_acc": "higher"})
    config = TrialConfig.of(model=command_spec(command), lr=0.2)
    assert config.own_code == command and config.model.lr == 0.2
    assert TrialConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match=r"\{hidden\}"):
        command_from("python train.py --hidden {hidden}", {}, {"a": "higher"})
    with pytest.raises(ConfigError, match="filled in by the runner"):
        command_from("python train.py", {"seed": 1}, {"a": "higher"})


def test_a_space_file_names_a_program_with_its_keys_and_metrics(tmp_path):
    space = tmp_path / "table.yaml"
    space.write_text("command: python train.py --hidden {hidden} --seed {seed}\n"
                     "config: {hidden: 64, rate: 0.5, augment: true}\n"
                     "metrics: {test_acc: higher, test_loss: lower nats}\n"
                     "variants:\n  baseline: {}\n  small: {hidden: 8}\n")
    prepared = prepare(Request(space=str(space), seeds=[0, 1]))
    code = prepared.base.own_code
    assert code.defaults == {"hidden": 64, "rate": 0.5, "augment": True}
    assert [spec.config.model.hidden for spec in prepared.trials] == [64, 64, 8, 8]
    assert prepared.design.plan_spec["decision"].metric == "test_acc"  # the first declared
    space.write_text("metrics: {a: higher}\nvariants:\n  baseline: {}\n")
    with pytest.raises(ConfigError, match="give its 'command' too"):
        prepare(Request(space=str(space)))


def test_the_verdicts_metric_must_be_one_the_code_declares(tmp_path):
    space = tmp_path / "table.yaml"
    space.write_text(f"model: {SPEC}\nvariants:\n  baseline: {{}}\n  wide: {{width: 8}}\n")
    assert prepare(Request(space=str(space))).design.plan_spec["decision"].metric == "test_score"
    given = Request(space=str(space), metric="val_score", given=frozenset({"metric"}))
    assert prepare(given).design.plan_spec["decision"].metric == "val_score"
    with pytest.raises(UsageError, match="'test_mae' is not a metric the code declares"):
        prepare(Request(space=str(space), metric="test_mae", given=frozenset({"metric"})))
    with pytest.raises(UsageError, match="own code loads"):
        prepare(Request(space=str(space), data=str(tmp_path), given=frozenset({"data"})))


def test_a_command_line_flag_takes_its_defaults_from_set_and_needs_metrics(tmp_path):
    space = tmp_path / "table.yaml"
    space.write_text("variants:\n  baseline: {}\n  small: {hidden: 8}\n")
    request = Request(space=str(space), command="python t.py --hidden {hidden}",
                      metrics="acc:higher,loss:lower:nats", overrides=[("hidden", "32")])
    code = prepare(request).base.own_code
    assert code.defaults == {"hidden": 32}
    assert (code.metrics["loss"].direction, code.metrics["loss"].unit) == ("lower", "nats")
    with pytest.raises(UsageError, match="declare the program's metrics"):
        prepare(dataclasses.replace(request, metrics=None))


def test_declared_metrics_give_directions_and_units_and_nothing_else_a_unit():
    assert metric_direction("test_acc") == 0 and unit_of("test_mae") == "km"
    declared = {"test_acc": {"direction": "higher", "unit": ""},
                "test_mae": {"direction": "lower", "unit": "nats"}}
    assert metric_of("test_acc", declared) == Metric("test_acc", "higher", "")
    assert metric_of("test_mae", declared) == Metric("test_mae", "lower", "nats")
    # an undeclared column of own code: the built-in direction, no unit
    assert metric_of("test_rmse", declared) == Metric("test_rmse", "lower", "")
    assert metric_direction("test_acc", declared) == 1
    assert unit_of(metric_of("test_mae", declared)) == "nats"
    # the declarations as own code holds them (Metric values) read the same
    assert metric_of("test_mae", parse_metrics(declared)) == metric_of("test_mae", declared)
    # nothing is left behind: the built-in model's reading is unchanged
    assert metric_direction("test_acc") == 0 and unit_of("test_mae") == "km"


def test_a_function_reports_each_epoch_and_ends_with_its_metrics(tmp_path):
    result, sent, stored = run(TrialConfig.of(model=SPEC), tmp_path=tmp_path)
    epochs = [m["epoch"] for m, final, _ in sent if not final]
    assert epochs == [1, 2, 3]
    final, is_final, predictions = sent[-1]
    assert is_final and final["status"] == "ok" and final["epochs_run"] == 3
    assert final["test_score"] == pytest.approx(4 * final["val_score"])
    assert list(predictions["sample_index"]) == [0, 1]
    assert [s["epoch"] for s in stored][-1] == 3 and len(stored[-1]["history"]) == 3


def test_an_epoch_below_one_is_refused_naming_the_fix(tmp_path):
    trial = Trial(TrialConfig.of(model=SPEC), name="baseline-seed0", send=lambda *a: None,
                  store=lambda s: None, saved=None, folder=tmp_path, device=torch.device("cpu"),
                  resources={"CPU": 1})
    for epoch in (0, -3):
        with pytest.raises(OwnCodeError, match=rf"trial.report\(epoch={epoch}\): epochs count "
                                               "from 1"):
            trial.report(epoch=epoch, val_score=1.0)
    trial.report(epoch=1, val_score=1.0)
    assert [row["epoch"] for row in trial.history] == [1]


def test_a_restarted_function_continues_from_its_last_save(tmp_path):
    whole, _, stored = run(TrialConfig.of(model=SPEC), tmp_path=tmp_path)
    after_two = next(s for s in stored if s["epoch"] == 2)
    resumed, sent, _ = run(TrialConfig.of(model=SPEC), saved=after_two, tmp_path=tmp_path)
    assert [m["epoch"] for m, final, _ in sent if not final] == [3]
    assert resumed["resumed_from_epoch"] == 2 and resumed["epochs_run"] == 3


def test_a_non_finite_declared_metric_ends_the_trial_diverged(tmp_path):
    result, sent, _ = run(TrialConfig.of(model=SPEC, explode=True), tmp_path=tmp_path)
    assert result["status"] == "diverged" and "val_score=inf at epoch 1" in result["error"]
    assert len([m for m, final, _ in sent if not final]) == 1  # training stopped there


def test_a_declared_metric_found_nowhere_fails_the_trial_with_what_it_returned(tmp_path):
    with pytest.raises(OwnCodeError, match="'test_score' is neither returned nor reported"):
        run(TrialConfig.of(model=SPEC, forget=True), tmp_path=tmp_path)


def test_the_trials_seeds_are_the_runners_per_source(tmp_path):
    config = TrialConfig.of(model=SPEC, seed=3, seed_sources="init,order")
    trial = Trial(config, name="baseline-seed3", send=lambda *a: None, store=lambda s: None,
                  saved=None, folder=tmp_path, device=torch.device("cpu"), resources={})
    assert (trial.seeds.init, trial.seeds.order, trial.seeds.data) == (3, 3, 0)
    trial.seed_everything()
    first = torch.rand(())
    trial.seed_everything()
    assert torch.rand(()) == first
    order = torch.rand((), generator=trial.generator("order"))
    assert order == torch.rand((), generator=torch.Generator().manual_seed(3))
    assert order != torch.rand((), generator=trial.generator("data"))


def test_the_library_takes_a_command_with_its_metrics_as_a_mapping(tmp_path):
    from ablations import Experiment

    space = tmp_path / "table.yaml"
    space.write_text("variants:\n  baseline: {}\n  small: {hidden: 8}\n")
    experiment = Experiment(str(space), seeds=2, command="python t.py --hidden {hidden}",
                            metrics={"acc": "higher"}, overrides={"hidden": 32})
    trials = experiment.plan()
    assert [spec.config.model.hidden for spec in trials] == [32, 32, 8, 8]
    assert trials[0].config.own_code.metrics["acc"].direction == "higher"


def test_a_runner_key_own_code_does_not_take_is_refused_with_its_own_keys():
    with pytest.raises(ConfigError, match="unknown key 'batch_size'.*width"):
        TrialConfig.of(model=SPEC, batch_size=3)
    config = TrialConfig.of(model=SPEC, precision="bf16", seed=2)  # a switch, the identity
    assert config.systems.precision == "bf16" and config.flat()["precision"] == "bf16"


def test_names_that_are_the_runners_columns_are_refused():
    with pytest.raises(ConfigError, match="'error'"):
        TrainingFunction(name="t", config=ToyConfig, fit=toy_fit, metrics={"error": "lower"})
    with pytest.raises(ConfigError, match="'width'"):
        TrainingFunction(name="t", config=ToyConfig, fit=toy_fit, metrics={"width": "lower"})

    @dataclass(frozen=True)
    class Clash:
        precision: str = "fp32"

    with pytest.raises(ConfigError, match="'precision'"):
        TrainingFunction(name="t", config=Clash, fit=toy_fit, metrics={"score": "higher"})


def test_a_config_field_without_a_default_or_of_another_type_is_refused():
    @dataclass(frozen=True)
    class NoDefault:
        width: int

    @dataclass(frozen=True)
    class Widths:
        widths: tuple = (3, 4)

    for config in (NoDefault, Widths):
        with pytest.raises(ConfigError, match="widths|width"):
            TrainingFunction(name="t", config=config, fit=toy_fit, metrics={"s": "higher"})


def test_a_config_field_holding_a_list_is_taken_and_a_variants_list_typed_like_it():
    @dataclass(frozen=True)
    class Layers:
        widths: list = dataclasses.field(default_factory=lambda: [8, 16])

    TrainingFunction(name="t", config=Layers, fit=toy_fit, metrics={"s": "higher"})
    assert held_like(["32", "64"], Layers().widths) == [32, 64]  # a variant's YAML list


def test_a_search_space_is_refused_with_own_code(tmp_path):
    with pytest.raises(UsageError, match="hpo.*own code"):
        prepare(Request(space="hpo", model=SPEC))


def test_a_restarted_function_ends_on_the_uninterrupted_numbers(tmp_path):
    whole, _, stored = run(TrialConfig.of(model=SPEC), tmp_path=tmp_path)
    after_two = next(s for s in stored if s["epoch"] == 2)
    resumed, _, _ = run(TrialConfig.of(model=SPEC), saved=after_two, tmp_path=tmp_path)
    assert resumed["test_score"] == whole["test_score"] > 0


def test_the_end_keeps_the_history_but_not_a_state_newer_than_the_last_save(tmp_path):
    def sparse_fit(config, trial):  # reports every epoch, saves at epoch 2 only
        for epoch in range(trial.start_epoch + 1, 5):
            trial.report(epoch=epoch, val_score=float(epoch))
            if epoch == 2:
                trial.save({"w": torch.tensor(float(epoch))})
        return {"test_score": 1.0}

    code = TrainingFunction(name="sparse", config=ToyConfig, fit=sparse_fit,
                            metrics={"test_score": "higher"})
    import sys

    sys.modules[__name__].SPARSE = code
    _, _, stored = run(TrialConfig.of(model=f"{__name__}:SPARSE"), tmp_path=tmp_path)
    states = [s for s in stored if "user" in s]
    assert [(s["epoch"], float(s["user"]["w"])) for s in states] == [(2, 2.0)]
    assert [row["epoch"] for row in stored[-1]["history"]] == [1, 2, 3, 4]


def test_a_state_torch_cannot_read_back_safely_fails_at_its_first_save(tmp_path):
    import numpy as np

    def numpy_fit(config, trial):
        trial.report(epoch=1, val_score=1.0)
        trial.save({"rng": np.random.get_state()})
        return {"test_score": 1.0}

    import sys

    sys.modules[__name__].NUMPY = TrainingFunction(name="np", config=ToyConfig, fit=numpy_fit,
                                                   metrics={"test_score": "higher"})
    with pytest.raises(OwnCodeError, match="weights_only"):
        run(TrialConfig.of(model=f"{__name__}:NUMPY"), tmp_path=tmp_path)


def test_a_declared_metric_that_is_not_a_number_fails_the_trial(tmp_path):
    def text_fit(config, trial):
        return {"test_score": "high"}

    import sys

    sys.modules[__name__].TEXT = TrainingFunction(name="text", config=ToyConfig, fit=text_fit,
                                                  metrics={"test_score": "higher"})
    with pytest.raises(OwnCodeError, match="'high' is not a number"):
        run(TrialConfig.of(model=f"{__name__}:TEXT"), tmp_path=tmp_path)


def test_a_state_saved_by_the_built_in_loop_alone_resumes(tmp_path):
    loop_state = {"epoch": 2, "history": [{"epoch": 1}, {"epoch": 2}], "model": {}}
    trial = Trial(TrialConfig(), name="baseline-seed0", send=lambda *a: None,
                  store=lambda s: None, saved=loop_state, folder=tmp_path,
                  device=torch.device("cpu"), resources={})
    assert trial.restore() is loop_state and trial.start_epoch == 2


def test_the_built_in_model_through_run_trial_is_the_loop_to_the_last_digit(tmp_path):
    from ablations.trial.loop import train
    from tests.conftest import tiny_config

    config = tiny_config(epochs=2)
    alone = train(config)
    result, sent, stored = run(config, tmp_path=tmp_path)
    assert result["status"] == "ok" and result["test_mae"] == alone.metrics["test_mae"]
    assert [m["epoch"] for m, final, _ in sent] == [1, 2]  # one report an epoch
    assert sent[-1][1] and sent[-1][2] is not None  # the last with the predictions
    assert [s["epoch"] for s in stored if "user" in s] == [1, 2]


def test_a_commands_values_are_typed_by_yaml_1_2_and_quoted_text_stays_text(tmp_path):
    """off, NO and 12:30 are text (YAML 1.1 read them as false, false and 750), 010 is ten,
    and a quoted '010' stays the text 010."""
    from ablations.search_spaces.files import load_space_file
    from ablations.config.code import command_of

    (tmp_path / "space.yaml").write_text(
        "command: '{python} p.py {a} {b} {c} {d} {e}'\n"
        "config: {a: off, b: NO, c: 12:30, d: 010, e: '010'}\n"
        "metrics: {score: higher}\n"
        "variants: {baseline: {}}\n")
    space = load_space_file(tmp_path / "space.yaml")
    defaults = command_of(space["model"]).defaults
    assert defaults == {"a": "off", "b": "NO", "c": "12:30", "d": 10, "e": "010"}
    assert [type(value) for value in defaults.values()] == [str, str, str, int, str]


def test_a_key_given_twice_in_a_space_file_is_refused_naming_both_lines(tmp_path):
    from ablations.config import ConfigError
    from ablations.search_spaces.files import load_space_file

    (tmp_path / "space.yaml").write_text(
        "variants:\n  baseline: {}\n  no_images: {use_images: false}\n"
        "  no_images: {use_scalars: false}\n")
    with pytest.raises(ConfigError, match=r"key 'no_images' is given twice \(lines 3 and 4\)"):
        load_space_file(tmp_path / "space.yaml")


def test_values_a_program_cannot_receive_are_refused_before_launch(tmp_path, capsys):
    """A NUL byte, one value as long as Linux's MAX_ARG_STRLEN, or every key's JSON (the
    program's ABLATIONS_CONFIG) that long: one line naming the trial and the key, exit 2,
    before any trial; one byte less is planned."""
    from ablations.cli.main import main
    from ablations.trial.command import MAX_ARGUMENT_BYTES

    space = tmp_path / "table.yaml"
    space.write_text("command: '{python} -c pass {text}'\nconfig: {text: a}\n"
                     "metrics: {score: higher}\nvariants:\n  baseline: {}\n"
                     "  nul: {text: \"a\\0b\"}\n")
    with pytest.raises(ConfigError, match=r"trial nul-seed0: text: the value holds a NUL byte"):
        prepare(Request(space=str(space), seeds=[0]))
    longest = "x" * (MAX_ARGUMENT_BYTES - 1)  # fits with its terminating NUL
    for text, planned in ((longest, False), (longest[:-1], False), ("x" * 5000, True)):
        space.write_text("command: '{python} -c pass {text}'\nconfig: {text: a}\n"
                         "metrics: {score: higher}\nvariants:\n  baseline: {}\n"
                         f"  long: {{text: {text}}}\n")
        if planned:
            assert len(prepare(Request(space=str(space), seeds=[0])).trials) == 2
            continue
        with pytest.raises(ConfigError, match=r"trial long-seed0: (text: the value is|the keys' "
                                              r"values are [\d,]+ bytes as JSON)"):
            prepare(Request(space=str(space), seeds=[0]))
    space.write_text("command: '{python} -c pass {text}'\nconfig: {text: a}\n"
                     "metrics: {score: higher}\nvariants:\n  baseline: {}\n"
                     f"  long: {{text: {'y' * MAX_ARGUMENT_BYTES}}}\n")
    code = main(["--space", str(space), "--seeds", "1", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"text: the value is {MAX_ARGUMENT_BYTES:,} bytes" in err[0] and "file" in err[0]


@pytest.mark.slow
@pytest.mark.parametrize(("printed", "problem"), [
    ('{"score": true}', "metric score: true is not a number"),
    ('{"score": "0.9"}', 'metric score: "0.9" is not a number'),
    ('{"score": 1' + "0" * 400 + "}", "is too large for a 64-bit float"),
    ('{"epoch": 1, "score": [1]}', "metric score: [1] is not a number"),
])
def test_a_programs_declared_metric_that_is_no_float_fails_the_trial_naming_it(
        tmp_path, printed, problem):
    """true (which Python counts as 1), text, a list and an integer beyond a float's range;
    an undeclared key of the same line that is no number is left out."""
    from ablations.config.code import command_from, command_spec

    script = tmp_path / "p.py"
    script.write_text(f"print({printed!r}[:-1] + ', \"note\": true}}')\n")
    command = command_from(f"{{python}} {script}", {}, {"score": "higher"})
    with pytest.raises(OwnCodeError, match=re.escape(problem)):
        run(TrialConfig.of(model=command_spec(command)), tmp_path=tmp_path / "trial")


def test_a_functions_integer_beyond_a_float_fails_the_trial_naming_it(tmp_path):
    from ablations.trial.own_code import final_value

    assert final_value("steps", 10 ** 12) == 10 ** 12  # an int a float holds stays an int
    with pytest.raises(OwnCodeError, match="metric score=1000.* is too large for a 64-bit"):
        final_value("score", 10 ** 400)


def test_a_command_beside_a_built_in_space_is_refused_asking_for_a_space_file():
    for request in (Request(command="{python} t.py --lr {lr}", metrics="acc:higher",
                            overrides=[("lr", "0.1")]), Request(metrics="acc:higher")):
        with pytest.raises(UsageError, match=r"space components is a table of the built-in "
                                             r"model's keys; .*give space FILE"):
            prepare(request)


def test_dataset_refusals_name_where_the_datasets_were_given(tmp_path):
    with pytest.raises(UsageError, match=r"^datasets: 'synthetic' names the embedded synthetic "
                                         r"data; give the dataset '.*' another name"):
        prepare(Request(datasets=[f"synthetic={tmp_path}", "b=synthetic"]))
    space = tmp_path / "two.yaml"
    space.write_text("datasets: {a.b: synthetic, c: synthetic}\n"
                     "variants: {baseline: {}, small: {epochs: 1}}\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(space))}: datasets: 'a.b' is not a "
                                         "dataset name"):
        prepare(Request(space=str(space)))


def test_a_dry_run_shows_each_programs_line_and_a_key_off_the_line_is_refused(tmp_path):
    space = tmp_path / "dup.yaml"
    space.write_text('command: "{python} train.py --lr {lr} --seed {seed} --out {trial_dir}"\n'
                     "config: {lr: 0.1, hidden: 4}\nmetrics: {loss: lower}\n"
                     "variants: {baseline: {}, hi: {lr: 0.5}}\n")
    prepared = prepare(Request(space=str(space), seeds=[0, 1]))
    text = "\n".join(prepared.design.describe(
        prepared.trials, prepared.base.replace(ablation="baseline"), prepared.skipped))
    assert "       $ {python} train.py --lr 0.5 --seed 1 --out '<trial_dir>'" in text
    assert "       $ {python} train.py --lr 0.1 --seed 0 --out '<trial_dir>'" in text
    space.write_text(space.read_text().replace("hi: {lr: 0.5}", "hi: {lr: 0.5}, small: "
                                               "{hidden: 2}"))
    with pytest.raises(ConfigError, match=r"^trial small-seed0: hidden=2 changes a key the "
                                          r"command line never names, so the program would run "
                                          r"as with hidden=4; put \{hidden\} on the line"):
        prepare(Request(space=str(space), seeds=[0, 1]))
    # a program that reads ABLATIONS_CONFIG names no key on its line: any key may change
    space.write_text(space.read_text().replace("--lr {lr} ", ""))
    assert len(prepare(Request(space=str(space), seeds=[0])).trials) == 3
