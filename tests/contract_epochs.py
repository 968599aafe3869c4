"""A kind of own code of one's own, in one file (docs/architecture.md, "Adding a contract"):
a generator of each epoch's metrics. ``epochs(config, seed)`` yields one mapping per epoch;
the contract reports each, and the last is the trial's result. ``--model
tests.contract_epochs:TOY`` (a space file's ``model:``) names the one below."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from ablations.contract import Contract, OwnCode, register_contract


@dataclass(frozen=True)
class EpochGenerator(OwnCode):
    name: str
    config: type  # a frozen dataclass of its keys with their defaults
    epochs: Callable[[Any, int], Iterator[Mapping[str, float]]]
    metrics: Any  # name -> direction, as a training function declares them

    def __post_init__(self) -> None:
        self.check()  # the metrics parsed, the keys' defaults and names checked


def fit_epochs(code: EpochGenerator, model: Any, trial: Any) -> Mapping[str, float]:
    last: Mapping[str, float] = {}
    for epoch, metrics in enumerate(code.epochs(model, trial.seed_of("init")), start=1):
        trial.report(epoch=epoch, **metrics)
        last = metrics
    return last


register_contract(EpochGenerator, Contract(
    fit=fit_epochs, modules=lambda code: (code.epochs.__module__,)))


@dataclass(frozen=True)
class Toy:
    steps: int = 3
    width: int = 4


def toy_epochs(config: Toy, seed: int) -> Iterator[Mapping[str, float]]:
    rng = random.Random(seed)
    loss = 1.0
    for _ in range(config.steps):
        loss *= 0.5 + 0.1 * rng.random() + 1.0 / config.width
        yield {"val_loss": loss}


TOY = EpochGenerator("toy-epochs", Toy, toy_epochs, {"val_loss": "lower"})
