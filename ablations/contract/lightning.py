"""Lightning through the training-function contract: :func:`fit_lightning`, which a user's
``fit(config, trial)`` calls with its LightningModule and LightningDataModule.

It applies the trial's seeds, runs a quiet Trainer on the trial's device (no progress bar, no
model summary, no logger, no INFO lines, no possible-user warnings: the runner's console is the
runner's), reports the module's logged values once an epoch, keeps a Lightning checkpoint in
the trial's folder through ``trial.save`` so that a restarted trial continues from its last
epoch, and returns the test metrics over the last logged values. Lightning is an optional
extra: ``pip install 'ablation-runner[lightning]'``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from ablations.trial.own_code import Trial

CHECKPOINT = "last.ckpt"  # the Lightning checkpoint in the trial's folder
# The loggers whose INFO lines ("GPU available: ...", "`Trainer.fit` stopped: ...") stay quiet
_LOGGERS = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")


def fit_lightning(module: Any, datamodule: Any, trial: "Trial", *, max_epochs: int,
                  **trainer_kwargs: Any) -> dict[str, float]:
    """Fit ``module`` on ``datamodule`` for ``max_epochs`` epochs, then test it.

    Each epoch, after the training epoch and its validation, the values the module logged
    (``trainer.callback_metrics``: e.g. ``train_loss``, ``val_acc``) go to ``trial.report``
    and the trainer's checkpoint to ``trial.folder / "last.ckpt"``, then ``trial.save``; a
    restarted trial fits from that checkpoint (from the start when the file is gone). Values
    logged in the module's own ``on_train_epoch_end`` reach the next epoch's report (log them
    in a step instead). A declared metric that is not finite ends the trial as ``diverged``.

    Call ``trial.seed_everything()`` before building the module (its weights come from the
    ``init`` seed); this seeds again, and Lightning's workers, before fitting.

    Args:
        module: a ``LightningModule`` (from ``lightning`` or ``pytorch_lightning``).
        datamodule: its ``LightningDataModule``, or None when the module has its own loaders.
        trial: the trial ``fit`` was given.
        max_epochs: the epochs to train.
        trainer_kwargs: more ``Trainer`` arguments (e.g. ``gradient_clip_val``,
            ``callbacks``).

    Returns:
        The test metrics (when the module has a ``test_step``) over the last logged values.
    """
    pl = _lightning_of(module)
    callbacks = [*trainer_kwargs.pop("callbacks", []), _reporter(pl, trial)]
    saved = trial.restore()
    checkpoint = trial.folder / saved["checkpoint"] if saved else None
    with _quiet(pl):
        trial.seed_everything()
        pl.seed_everything(trial.seeds.init, workers=True, verbose=False)
        trainer = pl.Trainer(
            accelerator="gpu" if trial.device.type == "cuda" else "cpu", devices=1,
            max_epochs=max_epochs, enable_progress_bar=False, enable_model_summary=False,
            logger=False, enable_checkpointing=False, default_root_dir=trial.folder,
            callbacks=callbacks, **trainer_kwargs)
        trainer.fit(module, datamodule=datamodule, weights_only=True,  # torch.load's safe mode
                    ckpt_path=checkpoint if checkpoint and checkpoint.is_file() else None)
        metrics = _numbers(trainer.callback_metrics)
        if type(module).test_step is not pl.LightningModule.test_step:
            for tested in trainer.test(module, datamodule=datamodule, verbose=False):
                metrics.update(_numbers(tested))
    return metrics


def _lightning_of(module: Any) -> ModuleType:
    """The Lightning package ``module`` was written against: ``lightning.pytorch`` or the
    standalone ``pytorch_lightning`` (their Trainers accept only their own modules)."""
    standalone = any(base.__module__.startswith("pytorch_lightning")
                     for base in type(module).__mro__)
    try:
        if standalone:
            import pytorch_lightning as pl
        else:
            import lightning.pytorch as pl
    except ImportError:
        raise ImportError("fit_lightning needs Lightning: pip install "
                          "'ablation-runner[lightning]'") from None
    return pl


def _reporter(pl: ModuleType, trial: "Trial") -> Any:
    """A callback that reports each epoch's logged values to the trial and saves the trainer's
    checkpoint through it."""

    class ReportToTrial(pl.Callback):
        # At the training epoch's end, after its validation: the logged values hold both the
        # epoch's training means (train_loss) and its validation's (val_acc).
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            trial.report(epoch=trainer.current_epoch + 1, **_numbers(trainer.callback_metrics))
            trainer.save_checkpoint(trial.folder / CHECKPOINT, weights_only=False)  # all state
            trial.save({"checkpoint": CHECKPOINT})

    return ReportToTrial()


def _numbers(metrics: Any) -> dict[str, float]:
    """Logged values (tensors of one element, or numbers) as floats."""
    return {str(name): float(value) for name, value in dict(metrics).items()
            if getattr(value, "numel", lambda: 1)() == 1}


@contextlib.contextmanager
def _quiet(pl: ModuleType) -> Iterator[None]:
    """Lightning's INFO lines, its possible-user warnings ("GPU available but not used",
    "does not have many workers") and its internals' future warnings held back while the
    trial fits."""
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore",
                                    category=pl.utilities.warnings.PossibleUserWarning)
            # Lightning's own calls into torch's deprecated APIs (e.g. LeafSpec, torch 2.13)
            warnings.filterwarnings("ignore", category=FutureWarning,
                                    module=r"(lightning|pytorch_lightning)\.")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
