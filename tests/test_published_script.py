"""A published training script ablated as it is, from a project folder outside the checkout:
its metrics read from the lines it prints (ablations/config/printed.py), each trial in a working
folder of its own (ablations/trial/work_folder.py), so that two trials running at once and
saving their model under the same fixed name each test their own."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest

from tests.conftest import run_here

pytestmark = pytest.mark.slow  # trains through the command line, on the test worker's shared Ray

# The word-level language model script's shape: argparse, --seed, a store_true flag, its metrics
# printed as text, the model saved under a fixed name in the folder it runs in and loaded back
# for the test. Its "model" is its seed; a trial that tested another's model prints that one's.
# Each run marks its start in sync/ (a folder of the project, shared through its link) and
# waits for a second trial to start, so that two runs overlap wherever two can run at once.
SCRIPT = '''
import argparse, json, math, os, time

from utils import perplexity

parser = argparse.ArgumentParser(description="Word-level language model")
parser.add_argument("--lr", type=float, default=20)
parser.add_argument("--tied", action="store_true")
parser.add_argument("--seed", type=int, default=1111)
parser.add_argument("--save", type=str, default="model.pt")
args = parser.parse_args()
started = time.time()
open(os.path.join("sync", f"{args.seed}-{args.lr}-{args.tied}"), "w").close()
while len(os.listdir("sync")) < 2 and time.time() < started + 60:
    time.sleep(0.05)
model = {"seed": args.seed, "lr": args.lr, "tied": args.tied}
with open(args.save, "w") as f:
    json.dump(model, f)
for epoch in (1, 2):
    loss = 7 - epoch / 10 + args.seed / 100 + (0.3 if args.tied else 0)
    print("-" * 89)
    print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | "
          "valid ppl {:8.2f}".format(epoch, 12.3, loss, perplexity(loss)))
    time.sleep(0.3)
with open(args.save) as f:
    tested = json.load(f)
test_loss = 6.6 + tested["seed"] / 100 + (0.3 if tested["tied"] else 0)
print("=" * 89)
print("| End of training | test loss {:5.2f} | test ppl {:8.2f}".format(
    test_loss, perplexity(test_loss)))
with open("times.json", "w") as f:
    json.dump({"start": started, "end": time.time(), "tested": tested}, f)
'''
UTILS = "import math\n\n\ndef perplexity(loss):\n    return math.exp(loss)\n"
SPACE = r"""
command: "{python} main.py --lr {lr} {tied:--tied} --seed {seed}"
config: {lr: 20, tied: false}
metrics:
  test_ppl: {direction: lower, printed: 'End of training .*test ppl +(?P<value>\S+)'}
  valid_ppl: {direction: lower, printed: 'end of epoch +(?P<epoch>\d+) .*valid ppl +(?P<value>\S+)'}
variants:
  baseline: {}
  tied: {tied: true}
"""


def test_a_script_that_prints_text_and_saves_a_fixed_name_runs_unedited(tmp_path):
    project = tmp_path / "word_language_model"
    (project / "sync").mkdir(parents=True)
    (project / "main.py").write_text(SCRIPT.lstrip())
    (project / "utils.py").write_text(UTILS)
    (project / "space.yaml").write_text(textwrap.dedent(SPACE).lstrip())
    run = run_here("--space", "space.yaml", "--seeds", "2", "--cpus-per-trial", "0.5",
                   "--max-concurrent", "2", "--no-dashboard", "--storage", str(tmp_path),
                   "--name", "lm", cwd=project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    dry = run_here("--space", "space.yaml", "--seeds", "2", "--dry-run", cwd=project)
    # the dry run shows the program, its keys and where each metric is read, and no runner key
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert ("4 trials. The program:\n  command: {python} main.py --lr {lr} {tied:--tied} --seed "
            "{seed}\n  keys: lr=20, tied=false\n  metric test_ppl (lower): printed, pattern "
            in dry.stdout), dry.stdout
    for internal in ("seed_offset", "precision:", "channels_last", "command:{"):
        assert internal not in dry.stdout, dry.stdout
    assert "$ {python} main.py --lr 20 --tied --seed 1" in dry.stdout
    trials = pd.read_parquet(tmp_path / "lm" / "trials.parquet").set_index("trial_name")
    assert (trials["status"] == "ok").all(), trials["error"]
    assert "Verdicts on test_ppl (lower is better) against baseline" in run.stdout
    times = {}
    for name, row in trials.iterrows():
        outputs = row["outputs_dir"]
        ran = json.loads(open(f"{outputs}/times.json").read())
        times[name] = (ran["start"], ran["end"])
        # the model it tested is its own, saved under the fixed name in its own folder
        assert ran["tested"] == {"seed": int(row["seed"]), "lr": 20, "tied": row["ablation"]
                                 == "tied"}, (name, ran)
        loss = 6.6 + int(row["seed"]) / 100 + (0.3 if row["ablation"] == "tied" else 0)
        assert row["test_ppl"] == pytest.approx(float(f"{2.718281828459045 ** loss:.2f}"))
    assert not (project / "model.pt").exists()  # nothing written in the project's folder
    overlapped = [(a, b) for a in times for b in times if a < b
                  and times[a][0] < times[b][1] and times[b][0] < times[a][1]]
    assert overlapped, times
    epochs = pd.read_parquet(tmp_path / "lm" / "epochs.parquet")
    curves = epochs.groupby("trial_name")["epoch"].apply(list).to_dict()
    assert curves == {name: [1, 2] for name in trials.index}
    assert epochs["valid_ppl"].notna().all()
