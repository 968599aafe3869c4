"""The digits classifier as a LightningModule and LightningDataModule, ablated through the
training-function contract with :func:`ablations.contract.lightning.fit_lightning`.

Run its ablation table (examples/digits/lightning.yaml; needs the ``lightning`` extra) with::

    python run_ablations.py --space examples/digits/lightning.yaml --seeds 3

The module logs ``train_loss``, ``val_acc`` and ``val_loss`` each epoch (the trial's reports)
and ``test_acc`` and ``test_loss`` in its test (the trial's final metrics); the data module
splits the digits by the trial's ``data`` seed and shuffles them with its ``order`` seed.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ablations.contract import TrainingFunction
from ablations.contract.lightning import fit_lightning
from examples.digits.common import DigitsConfig, DigitsNet, load_split, predictions_frame, shift


class DigitsModule(pl.LightningModule):
    def __init__(self, config: DigitsConfig) -> None:
        super().__init__()
        self.config = config
        self.net = DigitsNet(config)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)  # (B, 8, 8) -> (B, 10)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        if self.config.augment:
            images = shift(images)
        loss = F.cross_entropy(self(images), labels, label_smoothing=self.config.label_smoothing)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _evaluate(self, batch: Any, stage: str) -> None:
        images, labels = batch
        logits = self(images)
        self.log(f"{stage}_loss", F.cross_entropy(logits, labels), on_epoch=True)
        self.log(f"{stage}_acc", (logits.argmax(dim=1) == labels).float().mean(), on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.config.lr)

    # torch's generator (dropout, the shifts) in the checkpoint: a restart continues bit for bit
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["torch_rng"] = torch.get_rng_state()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        torch.set_rng_state(checkpoint["torch_rng"])


class DigitsData(pl.LightningDataModule):
    """The split of the trial's ``data`` seed; training batches in the order of its ``order``
    seed (the generator's state is in the checkpoint); validation and test in one batch."""

    def __init__(self, config: DigitsConfig, trial: Any) -> None:
        super().__init__()
        self.batch_size = config.batch_size
        self.split = load_split(trial.seeds.data, config.train_share, config.pixel_noise)
        self.order = trial.generator("order")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.split.train, batch_size=self.batch_size, shuffle=True,
                          generator=self.order)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.split.val, batch_size=len(self.split.val))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.split.test, batch_size=len(self.split.test))

    def state_dict(self) -> dict[str, Any]:
        return {"order_rng": self.order.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.order.set_state(state_dict["order_rng"])


def fit(config: DigitsConfig, trial: Any) -> dict[str, float]:
    trial.seed_everything()  # before the module: its weights come from the init seed
    module, data = DigitsModule(config), DigitsData(config, trial)
    metrics = fit_lightning(module, data, trial, max_epochs=config.epochs)
    images, labels = data.split.test.tensors
    with torch.no_grad():
        logits = module.eval()(images.to(module.device))
    trial.predictions(predictions_frame(logits, labels))
    return metrics


DIGITS_LIGHTNING = TrainingFunction(
    name="digits-lightning", config=DigitsConfig, fit=fit,
    metrics={"test_acc": "higher", "test_loss": {"direction": "lower", "unit": "nats"},
             "val_acc": "higher", "val_loss": {"direction": "lower", "unit": "nats"}})
