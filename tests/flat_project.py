"""A researcher's flat project folder, as most ML projects lay one out: ``model.py``,
``results.py``, ``search_spaces.py``, ``data.py``, ``utils.py``, ``config.py``, a script
``train.py`` (the command contract) and a training function in ``fn.py`` (the function
contract), both importing the folder's own ``model`` and ``results``. NumPy only: a trial
takes a fraction of a second. Used by tests/test_flat_project.py (a local Ray) and
tests/test_cluster_cli.py (a head and a worker started with `ray start`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

FILES = {
    # The names the runner must not take. Each module says whose it is, so that a trial that
    # imported the wrong one fails on a missing name rather than passing by chance.
    "model.py": """
        import numpy as np

        OWNER = "researcher"


        class Net:
            '''Logistic regression with an L2 penalty, trained by gradient descent.'''

            def __init__(self, features, l2, rng):
                self.w = rng.normal(0.0, 0.1, features)
                self.l2 = l2

            def loss(self, x, y):
                p = 1 / (1 + np.exp(-(x @ self.w)))
                return float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9)))

            def step(self, x, y, lr):
                p = 1 / (1 + np.exp(-(x @ self.w)))
                self.w -= lr * (x.T @ (p - y) / len(y) + self.l2 * self.w)
        """,
    "results.py": """
        import json

        OWNER = "researcher"


        def line(**metrics):
            '''One JSON line of metrics, as the runner reads them.'''
            return json.dumps(metrics)
        """,
    "search_spaces.py": """
        OWNER = "researcher"
        GRID = {"l2": [0.0, 0.1, 1.0]}
        """,
    "data.py": """
        import numpy as np


        def load(seed):
            rng = np.random.default_rng(seed)
            x = rng.normal(size=(400, 5))
            y = (x @ np.array([1.0, -2.0, 0.5, 0.0, 1.5]) + rng.normal(size=400) > 0) * 1.0
            return (x[:300], y[:300]), (x[300:], y[300:])
        """,
    "utils.py": """
        import os
        import time
        import uuid

        import numpy as np
        import yaml  # an installed package the trials' identity takes the version of

        VERSION = yaml.__version__


        def rng(seed):
            return np.random.default_rng(seed)


        def meet(folder, trials=2, timeout=300):
            # Wait until `trials` trials have arrived in `folder` ("none": no wait), so that
            # the trials of a test run at once, each holding its node's one CPU.
            if folder == "none":
                return
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, uuid.uuid4().hex), "w").close()
            deadline = time.monotonic() + timeout
            while len(os.listdir(folder)) < trials and time.monotonic() < deadline:
                time.sleep(0.1)
        """,
    "config.py": """
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Config:
            l2: float = 0.0
            epochs: int = 3
            lr: float = 0.5
            meet: str = "none"  # a folder where the trials wait for each other (utils.meet)
        """,
    # The script: its own flags, a JSON line per epoch and the test metrics last.
    "train.py": """
        import argparse

        import data
        import model
        import results
        import utils

        assert model.OWNER == results.OWNER == "researcher", "the runner's module was imported"

        parser = argparse.ArgumentParser()
        parser.add_argument("--l2", type=float, default=0.0)
        parser.add_argument("--epochs", type=int, default=3)
        parser.add_argument("--lr", type=float, default=0.5)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--meet", default="none")
        parser.add_argument("--standardize", action="store_true")  # a flag there or not
        args = parser.parse_args()
        (x, y), (x_test, y_test) = data.load(0)
        if args.standardize:
            mean, std = x.mean(axis=0), x.std(axis=0)
            x, x_test = (x - mean) / std, (x_test - mean) / std
        net = model.Net(x.shape[1], args.l2, utils.rng(args.seed))
        utils.meet(args.meet)
        for epoch in range(1, args.epochs + 1):
            net.step(x, y, args.lr)
            print(results.line(epoch=epoch, train_loss=net.loss(x, y)), flush=True)
        print(results.line(test_loss=net.loss(x_test, y_test)))
        """,
    # The training function, in a module beside the others.
    "fn.py": """
        import data
        import model
        import results
        import utils
        from config import Config

        from ablations.contract import TrainingFunction

        assert model.OWNER == results.OWNER == "researcher", "the runner's module was imported"


        def fit(config, trial):
            (x, y), (x_test, y_test) = data.load(trial.seeds.data)
            net = model.Net(x.shape[1], config.l2, utils.rng(trial.seeds.init))
            utils.meet(config.meet)
            for epoch in range(1, config.epochs + 1):
                net.step(x, y, config.lr)
                trial.report(epoch=epoch, train_loss=net.loss(x, y))
            return {"test_loss": net.loss(x_test, y_test)}


        FLAT = TrainingFunction(name="flat", config=Config, fit=fit,
                                metrics={"test_loss": "lower"})
        """,
    "command.yaml": """
        name: flat-command
        command: >-
          {python} train.py --l2 {l2} --epochs {epochs} --seed {init_seed} --meet {meet}
          {standardize:--standardize}
        config: {l2: 0.0, epochs: 3, meet: "none", standardize: true}
        metrics: {test_loss: lower}
        variants:
          baseline: {}
          raw_features: {standardize: false}
        """,
    "fit.yaml": """
        name: flat-fit
        variants:
          baseline: {}
          strong_l2: {l2: 1.0}
        """,
}


def write_flat_project(folder: Path) -> Path:
    """The project's files in ``folder`` (created); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    return folder
