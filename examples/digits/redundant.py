"""Two components that stand in for each other: the interaction a one-at-a-time ablation
table misses (docs/factorial.md).

The classifier has two input branches, each an MLP from the whole 8x8 image to the 10 logits,
which are summed: branch ``a`` sees the image, branch ``b`` sees it mirrored left to right,
the same information in another order. Either branch alone learns the task, so removing one
(from the reference, both on) changes little, and the ablation table calls each removal
``equivalent`` or ``negligible``; removing both leaves a constant (a learned bias, chance
accuracy). The factorial design over the two switches finds it, as a two-factor interaction:

    python run_ablations.py --space examples/digits/redundancy.yaml --seeds 3
    python run_ablations.py --space examples/digits/redundancy.yaml --seeds 3 \\
        --design factorial --factors branch_a,branch_b
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from ablations.contract import TrainingFunction
from examples.digits.common import CLASSES, SIDE, load_split


@dataclass(frozen=True)
class RedundantConfig:
    branch_a: bool = True  # no_branch_a: without the branch that sees the image
    branch_b: bool = True  # no_branch_b: without the branch that sees it mirrored
    hidden: int = 64  # width of each branch's hidden layer
    epochs: int = 20
    lr: float = 0.002  # Adam's learning rate
    batch_size: int = 32


def branch(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(SIDE * SIDE, hidden), nn.ReLU(),
                         nn.Linear(hidden, CLASSES))


class TwoBranches(nn.Module):
    """The logits of the branches switched on, summed, plus a bias (all the model has with
    both off): (B, 8, 8) -> (B, 10)."""

    def __init__(self, config: RedundantConfig) -> None:
        super().__init__()
        self.a = branch(config.hidden) if config.branch_a else None
        self.b = branch(config.hidden) if config.branch_b else None
        self.bias = nn.Parameter(torch.zeros(CLASSES))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = self.bias.expand(images.shape[0], CLASSES)
        if self.a is not None:
            logits = logits + self.a(images)
        if self.b is not None:
            logits = logits + self.b(images.flip(-1))
        return logits


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean cross-entropy (nats)."""
    model.eval()
    logits = model(images)
    return (logits.argmax(1) == labels).float().mean().item(), F.cross_entropy(logits,
                                                                                labels).item()


def fit(config: RedundantConfig, trial) -> dict[str, float]:
    trial.seed_everything()
    split = load_split(trial.seeds.data)
    loader = DataLoader(split.train, batch_size=config.batch_size, shuffle=True,
                        generator=trial.generator("order"))
    model = TwoBranches(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    for epoch in range(1, config.epochs + 1):
        model.train()
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        val_acc, val_loss = evaluate(model, *split.val.tensors)
        trial.report(epoch=epoch, val_acc=val_acc, val_loss=val_loss)
    test_acc, test_loss = evaluate(model, *split.test.tensors)
    return {"test_acc": test_acc, "test_loss": test_loss}


REDUNDANT = TrainingFunction(
    name="digits-redundant", config=RedundantConfig, fit=fit,
    metrics={"test_acc": "higher", "test_loss": {"direction": "lower", "unit": "nats"}})
