"""docs/own-code.md's recipes by layout, each run as the page prints its space file: a Hydra
app, a LightningCLI script with its CSV log, a Hugging Face Trainer's JSON files and a torchrun
launch, each written the way such scripts are published, in a project folder outside the
checkout, on data the test writes there. (The argparse script that prints text:
tests/test_published_script.py.)"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, run_here

pytestmark = pytest.mark.slow  # trains through the command line, on the test worker's shared Ray

DOC = REPO / "docs" / "own-code.md"


def recipe(heading: str) -> str:
    """The space file printed under ``### heading`` in docs/own-code.md."""
    text = DOC.read_text()
    section = text.split(f"\n### {heading}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert found, f"no space file under {heading!r} in {DOC}"
    return found.group(1)


def points(n: int = 96) -> dict:
    """A small regression set: y = x · w + noise, fixed."""
    import random

    rng = random.Random(0)
    xs = [[rng.gauss(0, 1) for _ in range(4)] for _ in range(n)]
    ys = [x[0] - 2 * x[1] + 0.5 * x[2] + rng.gauss(0, 0.1) for x in xs]
    return {"x": xs, "y": ys}


def project(tmp_path: Path, files: dict[str, str], space: str) -> Path:
    folder = tmp_path / "project"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    (folder / "data.json").write_text(json.dumps(points()))
    (folder / "space.yaml").write_text(space)
    return folder


def run(folder: Path, tmp_path: Path, *extra: str) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    done = run_here("--space", "space.yaml", "--seeds", "1", "--no-dashboard", *extra,
                    "--storage", str(tmp_path / "results"), "--name", "recipe", cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "results" / "recipe"
    trials = pd.read_parquet(root / "trials.parquet")
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    return trials.set_index("ablation"), pd.read_parquet(root / "epochs.parquet"), done.stdout


def curves(epochs: pd.DataFrame, metric: str) -> dict[str, list[int]]:
    named = epochs.dropna(subset=[metric])
    return named.groupby("trial_name")["epoch"].apply(lambda e: sorted(e)).to_dict()


HYDRA_APP = {
    "train.py": '''
        import json
        import logging

        import hydra
        from omegaconf import DictConfig, ListConfig

        log = logging.getLogger(__name__)


        @hydra.main(version_base=None, config_path="conf", config_name="config")
        def main(cfg: DictConfig) -> None:
            # the types the overrides must arrive in
            assert isinstance(cfg.model.use_bias, bool), cfg.model.use_bias
            assert isinstance(cfg.model.widths, ListConfig), cfg.model.widths
            assert all(isinstance(w, int) for w in cfg.model.widths), cfg.model.widths
            assert isinstance(cfg.optimizer.lr, float) and cfg.optimizer.name == "sgd"
            data = json.load(open(hydra.utils.to_absolute_path("data.json")))
            loss = sum(y * y for y in data["y"]) / len(data["y"])
            for epoch in range(1, cfg.trainer.epochs + 1):
                loss *= (0.7 if cfg.model.use_bias else 0.9) - sum(cfg.model.widths) / 1000
                loss += cfg.seed / 1000
                log.info(f"epoch={epoch} val_loss={loss:.4f}")


        if __name__ == "__main__":
            main()
        ''',
    "conf/config.yaml": '''
        seed: 0
        optimizer: {lr: 0.1, name: sgd}
        model: {use_bias: true, widths: [8, 16]}
        trainer: {epochs: 3}
        ''',
}


def test_a_hydra_app_takes_its_overrides_in_hydras_grammar(tmp_path):
    pytest.importorskip("hydra")
    folder = project(tmp_path, HYDRA_APP, recipe("A Hydra app"))
    trials, epochs, out = run(folder, tmp_path)
    assert list(trials.index) == ["baseline", "no_bias", "wide"]
    assert curves(epochs, "val_loss") == {f"{v}-seed0": [1, 2, 3] for v in trials.index}
    # each variant's value reached the app: no bias decays slower, wider layers faster
    loss = trials["val_loss"]
    assert loss["wide"] < loss["baseline"] < loss["no_bias"], loss.to_dict()
    # Hydra's outputs folder is the trial's own
    for ablation in trials.index:
        outputs = Path(trials.loc[ablation, "outputs_dir"])
        assert list(outputs.glob("outputs/*/*/.hydra/overrides.yaml")), outputs
    assert "Verdicts on val_loss" in out


LIGHTNING_CLI = {
    "main.py": '''
        import json

        import lightning.pytorch as pl
        import torch
        from lightning.pytorch.cli import LightningCLI
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset


        class Regressor(pl.LightningModule):
            def __init__(self, lr: float = 0.05, hidden: int = 16):
                super().__init__()
                self.save_hyperparameters()
                self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))

            def step(self, batch):
                x, y = batch
                return nn.functional.mse_loss(self.net(x).squeeze(-1), y)

            def training_step(self, batch, batch_idx):
                loss = self.step(batch)
                self.log("train_loss", loss)
                return loss

            def validation_step(self, batch, batch_idx):
                self.log("val_loss", self.step(batch))

            def configure_optimizers(self):
                return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


        class Points(pl.LightningDataModule):
            def __init__(self, path: str = "data.json", batch_size: int = 16):
                super().__init__()
                self.path, self.batch_size = path, batch_size

            def setup(self, stage=None):
                data = json.load(open(self.path))
                x, y = torch.tensor(data["x"]), torch.tensor(data["y"])
                cut = len(y) * 3 // 4
                self.train = TensorDataset(x[:cut], y[:cut])
                self.val = TensorDataset(x[cut:], y[cut:])

            def train_dataloader(self):
                return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

            def val_dataloader(self):
                return DataLoader(self.val, batch_size=self.batch_size)


        if __name__ == "__main__":
            LightningCLI(Regressor, Points)
        ''',
}


def test_a_lightning_cli_script_is_read_from_its_csv_log(tmp_path):
    pytest.importorskip("jsonargparse")
    folder = project(tmp_path, LIGHTNING_CLI, recipe("LightningCLI"))
    trials, epochs, _ = run(folder, tmp_path, "--max-concurrent", "1")
    assert curves(epochs, "val_loss") == {f"{v}-seed0": [1, 2, 3] for v in trials.index}
    for ablation in trials.index:  # the values the CLI took: its saved config
        saved = next(Path(trials.loc[ablation, "outputs_dir"]).glob(
            "lightning_logs/version_*/config.yaml")).read_text()
        assert f"hidden: {16 if ablation == 'baseline' else 2}" in saved, saved


HF_TRAINER = {
    "run.py": '''
        import json
        from dataclasses import dataclass, field

        import torch
        from torch import nn
        from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed


        @dataclass
        class ModelArguments:
            hidden: int = field(default=16, metadata={"help": "hidden units"})


        class Regressor(nn.Module):
            def __init__(self, hidden):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))

            def forward(self, x, labels=None):
                out = self.net(x).squeeze(-1)
                return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


        class Points(torch.utils.data.Dataset):
            def __init__(self, x, y):
                self.x, self.y = torch.tensor(x), torch.tensor(y)

            def __len__(self):
                return len(self.y)

            def __getitem__(self, i):
                return {"x": self.x[i], "labels": self.y[i]}


        def main():
            model_args, training_args = HfArgumentParser(
                (ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
            set_seed(training_args.seed)
            data = json.load(open("data.json"))
            cut = len(data["y"]) * 3 // 4
            trainer = Trainer(model=Regressor(model_args.hidden), args=training_args,
                              train_dataset=Points(data["x"][:cut], data["y"][:cut]),
                              eval_dataset=Points(data["x"][cut:], data["y"][cut:]))
            result = trainer.train()
            trainer.save_metrics("train", result.metrics)
            trainer.save_metrics("eval", trainer.evaluate())
            trainer.save_state()


        if __name__ == "__main__":
            main()
        ''',
}


def test_a_hugging_face_trainer_is_read_from_its_json_files(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    folder = project(tmp_path, HF_TRAINER, recipe("A Hugging Face Trainer"))
    trials, epochs, _ = run(folder, tmp_path, "--max-concurrent", "1")
    # the curve by epoch from log_history (its 3 evaluations at epochs 1-3; the last, the
    # script's own evaluate(), also at epoch 3), the final values from both files
    assert curves(epochs, "eval_loss") == {f"{v}-seed0": [1, 2, 3] for v in trials.index}
    for ablation in trials.index:
        out = Path(trials.loc[ablation, "outputs_dir"]) / "out"
        assert trials.loc[ablation, "train_loss"] == pytest.approx(
            json.loads((out / "all_results.json").read_text())["train_loss"])
        history = json.loads((out / "trainer_state.json").read_text())["log_history"]
        assert trials.loc[ablation, "eval_loss"] == pytest.approx(
            [entry["eval_loss"] for entry in history if "eval_loss" in entry][-1])


TORCHRUN = {
    "train.py": '''
        import argparse
        import json
        import os
        import time

        import torch
        import torch.distributed as dist

        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.1)
        parser.add_argument("--epochs", type=int, default=3)
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if rank == 0:  # the two trials meet: each holds its port while the other starts
            open(os.path.join("sync", os.environ["MASTER_PORT"]), "w").close()
            deadline = time.time() + 60
            while len(os.listdir("sync")) < 2 and time.time() < deadline:
                time.sleep(0.05)
        dist.barrier()
        data = json.load(open("data.json"))
        torch.manual_seed(args.seed)
        w = torch.zeros(4, requires_grad=True)
        x, y = torch.tensor(data["x"][rank::world]), torch.tensor(data["y"][rank::world])
        for epoch in range(1, args.epochs + 1):
            loss = ((x @ w - y) ** 2).mean()
            loss.backward()
            dist.all_reduce(w.grad)
            with torch.no_grad():
                w -= args.lr * w.grad / world
                w.grad.zero_()
            total = loss.detach().clone()
            dist.all_reduce(total)
            if rank == 0:
                print(f"epoch {epoch}: val_loss={total.item() / world:.5f}", flush=True)
        dist.destroy_process_group()
        ''',
}


def test_two_torchrun_launches_on_one_node_each_get_a_port_of_their_own(tmp_path):
    folder = project(tmp_path, TORCHRUN, recipe("A torchrun launch"))
    (folder / "sync").mkdir()
    trials, epochs, _ = run(folder, tmp_path, "--cpus-per-trial", "0.5",
                            "--max-concurrent", "2")
    assert curves(epochs, "val_loss") == {f"{v}-seed0": [1, 2, 3] for v in trials.index}
    assert len(set((folder / "sync").iterdir())) == 2  # two ports, both trials at once
    assert trials.loc["low_lr", "val_loss"] > trials.loc["baseline", "val_loss"]
