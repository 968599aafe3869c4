"""The digits classifier as a training function: ``fit(config, trial)``, a plain PyTorch loop
that the runner ablates with its seeds, verdicts and resume.

Run its ablation table (examples/digits/ablations.yaml) with::

    python run_ablations.py --space examples/digits/ablations.yaml --seeds 3

What it takes from ``trial`` (docs/own-code.md): the seeds (``seed_everything`` for the
weights, dropout and augmentation; the ``order`` generator for the batches; the ``data`` seed
for the split), ``report`` once an epoch, ``save`` / ``restore`` for a restarted trial, the
device, and ``predictions`` for the per-digit analysis.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ablations.contract import TrainingFunction
from examples.digits.common import DigitsConfig, DigitsNet, load_split, predictions_frame, shift


@torch.no_grad()
def evaluate(model: DigitsNet, data: TensorDataset,
             device: torch.device) -> tuple[float, float, torch.Tensor]:
    """Accuracy, mean cross-entropy (nats) and the logits (N, 10) of ``data``, in one batch."""
    model.eval()
    images, labels = (t.to(device) for t in data.tensors)
    logits = model(images)
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return accuracy, F.cross_entropy(logits, labels).item(), logits


def fit(config: DigitsConfig, trial) -> dict[str, float]:
    trial.seed_everything()  # weights, dropout and the augmentation's shifts
    split = load_split(trial.seeds.data, config.train_share, config.pixel_noise)
    order = trial.generator("order")  # the order of the training images in each epoch
    loader = DataLoader(split.train, batch_size=config.batch_size, shuffle=True, generator=order)
    model = DigitsNet(config).to(trial.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)

    saved = trial.restore()  # the state after the last saved epoch of a restarted trial
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])  # so a restart continues bit for bit
        order.set_state(saved["order_rng"])

    for epoch in range(trial.start_epoch + 1, config.epochs + 1):
        model.train()
        total, count = 0.0, 0
        for images, labels in loader:
            if config.augment:
                images = shift(images)
            images, labels = images.to(trial.device), labels.to(trial.device)
            loss = F.cross_entropy(model(images), labels,
                                   label_smoothing=config.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(labels), count + len(labels)
        val_acc, val_loss, _ = evaluate(model, split.val, trial.device)
        trial.report(epoch=epoch, train_loss=total / count, val_acc=val_acc, val_loss=val_loss)
        trial.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(), "order_rng": order.get_state()})

    test_acc, test_loss, logits = evaluate(model, split.test, trial.device)
    trial.predictions(predictions_frame(logits, split.test.tensors[1]))
    return {"test_acc": test_acc, "test_loss": test_loss}


DIGITS = TrainingFunction(
    name="digits", config=DigitsConfig, fit=fit,
    metrics={"test_acc": "higher", "test_loss": {"direction": "lower", "unit": "nats"},
             "val_acc": "higher", "val_loss": {"direction": "lower", "unit": "nats"}})
