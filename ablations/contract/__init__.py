"""Own training code, ablated by the runner (docs/own-code.md): the public names.

- :class:`TrainingFunction`: ``fit(config, trial) -> metrics`` with a dataclass of keys and
  the metrics it declares; ``--model package.module:NAME`` (or a space file's ``model:``)
  names it.
- :class:`Command`: a program run per trial (``--command``, or a space file's ``command:``).
- :class:`Metric`: a metric's name, direction and unit (own code declares its metrics as
  these; the analysis functions take one for own code's metric).
- :class:`Trial`: what ``fit`` gets: seeds, ``report``, ``save`` / ``restore``, the device,
  predictions. :class:`Diverged` is what ``report`` raises for a declared metric that is not
  finite.
- ``ablations.contract.lightning.fit_lightning``: a LightningModule and DataModule trained
  as one trial (the ``lightning`` extra).
- :class:`OwnCode`, :class:`Contract` and :func:`register_contract`: a kind of own code of
  one's own and how a trial of it trains (docs/architecture.md, "Adding a contract").
"""

from __future__ import annotations

from ablations.config.code import Command, OwnCode, TrainingFunction
from ablations.config.metrics import Metric
from ablations.trial.contracts import Contract, register_contract
from ablations.trial.own_code import Diverged, Trial

__all__ = ["Command", "Contract", "Diverged", "Metric", "OwnCode", "Trial", "TrainingFunction",
           "register_contract"]
