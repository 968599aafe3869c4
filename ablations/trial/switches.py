"""The runner's systems switches for own code: precision, ``torch.compile``, activation
checkpointing and channels-last, applied by the user's training function to its own model and
step (``trial.switches``, opt-in: code that never calls them trains as it always did).

Each switch comes from the trial's ``systems`` section (``precision``, ``compile``,
``gradient_checkpointing``, ``channels_last``), so an ablation or a sweep can turn it on and off
like any other key, and each helper is a no-op when its switch is off. They apply the built-in
model's code (``ablations/trial/step.py``, ``ablations/trial/model_builder.py``) in the built-in
loop's order: channels-last, then checkpointing, then compile, after the move to the device.

:class:`Switches` trusts its config: unsafe combinations (a CUDA-graph compile mode off CUDA or
with checkpointing, ``tf32`` off CUDA, ``fp16`` on a CPU, compile without a C++ compiler, ...)
are refused, or mapped with ``--resolve-conflicts``, before any trial starts, by the same
rules as the built-in model's (:func:`ablations.config.safety.resolve_systems`;
docs/training-rules.md). Out-of-memory recovery stays with the runner's own loop: a user's
loop that runs out of memory fails its trial.

A training function using every switch::

    def fit(config, trial):
        trial.seed_everything()
        switches = trial.switches
        net = Net(config)                                  # the plain model
        model = switches.prepare(net, checkpoint=["encoder"])  # the model to train
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)  # after prepare
        for epoch in range(trial.start_epoch + 1, config.epochs + 1):
            model.train()
            for x, y in train_loader:                      # drop_last=True: fixed shapes
                x, y = x.to(trial.device), y.to(trial.device)
                with switches.autocast():
                    loss = F.cross_entropy(model(x), y)
                switches.step(loss, optimizer, max_grad_norm=1.0)
            net.eval()                                     # evaluate the plain model
            with torch.no_grad(), switches.autocast():
                val_loss = ...
            trial.report(epoch=epoch, val_loss=val_loss)
        return {"val_loss": val_loss}

The runner keeps :meth:`Switches.record` (what ran) with the trial's results.

The names given to ``checkpoint=`` are submodules of the model (``model.get_submodule``);
they are wrapped only when ``gradient_checkpointing`` is on, so the code names its blocks once
and the ablation decides. Create the optimizer after :meth:`Switches.prepare` and load saved
weights into the prepared model in place (``load_state_dict``): the compiled module shares the
plain model's parameters, and compiled code assumes they keep their storage. Save and load the
plain model's ``state_dict`` (the compiled one's keys start with ``_orig_mod.``); a
checkpointed block's keys gain ``.module``, the same in every trial with the same switches.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence, Union

import torch
from torch import nn

from ablations.config import TrialConfig
from ablations.trial.model_builder import to_channels_last, wrap_checkpoint_blocks
from ablations.trial.step import (
    NO_HOOKS,
    CompiledModel,
    autocast_for,
    compile_mode_for,
    make_scaler,
    set_float32_precision,
)


class Switches:
    """A trial's systems switches as helpers for own code; see the module docstring.

    Args:
        config: the trial's config; its ``systems`` section holds the switches, already
            checked for the trial's device by planning.
        device: the device the trial runs on (``trial.device``).
        compile_backend: torch.compile's backend: inductor in every trial; another
            (``eager``, ``aot_eager``) is for tests on a CPU, as the loop's
            :attr:`~ablations.trial.step.LoopHooks.compile_backend` is.
    """

    def __init__(self, config: TrialConfig, device: torch.device, *,
                 compile_backend: str = NO_HOOKS.compile_backend) -> None:
        systems = config.systems
        self.config, self.device, self.compile_backend = config, device, compile_backend
        self.precision = systems.precision
        self.compile_mode = systems.compile
        self.gradient_checkpointing = systems.gradient_checkpointing
        self.channels_last = systems.channels_last
        # TF32 is a process-wide setting: set (or reset, in a reused worker) before compiling
        set_float32_precision(self.precision, device)
        if self.compile_mode != "off":
            # Dynamo's caches outlive a trial in a reused worker; an earlier trial's graphs
            # count against the recompile limit, past which compiled code silently runs eager
            torch.compiler.reset()
        self._scaler = make_scaler(config, device)
        self._compiled: Optional[CompiledModel] = None
        self._ran = {"channels_last": False, "gradient_checkpointing": False,
                     "autocast": False}

    def prepare(self, model: nn.Module, *,
                checkpoint: Union[str, Sequence[str]] = ()) -> nn.Module:
        """The model to train: ``model`` moved to the device, its 4-D and 5-D parameters in
        the channels-last format (``channels_last``), the submodules named in ``checkpoint``
        recomputed in the backward pass (``gradient_checkpointing``), and compiled with the
        configured mode (``compile``). Every step but the compile changes ``model`` in place,
        so ``model`` stays the plain model (for evaluation) and shares its parameters with
        the returned one.

        Args:
            model: the user's model, as built.
            checkpoint: names of submodules to checkpoint (``"encoder"``, ``"blocks.0"``);
                used only when ``gradient_checkpointing`` is on.

        Raises:
            ValueError: ``gradient_checkpointing`` is on and ``checkpoint`` names no
                submodule, or names one the model does not have.
        """
        names = [checkpoint] if isinstance(checkpoint, str) else list(checkpoint)
        model = model.to(self.device)
        if self.channels_last:
            to_channels_last(model)
            self._ran["channels_last"] = True
        if self.gradient_checkpointing:
            if not names:
                raise ValueError(
                    "gradient_checkpointing=true: pass the blocks to recompute, "
                    "switches.prepare(model, checkpoint=[submodule names]), e.g. "
                    f"{_example_names(model)}")
            for name in names:
                try:
                    model.get_submodule(name)
                except AttributeError:
                    raise ValueError(f"checkpoint={names}: the model has no submodule "
                                     f"{name!r}; e.g. {_example_names(model)}") from None
            wrap_checkpoint_blocks(model, names)
            self._ran["gradient_checkpointing"] = True
        if self.compile_mode == "off":
            return model
        # the built-in loop's mapping with one micro-batch per step: own code's accumulation
        # is its own, and planning refused CUDA graphs where they cannot run
        self._compiled = CompiledModel(model, self.config, compile_mode_for(self.compile_mode, 1),
                                       backend=self.compile_backend)
        return self._compiled.forward

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Mixed precision for the forward pass and the loss: ``torch.autocast`` in bf16 or
        fp16, nothing for fp32 and tf32. With a CUDA-graph compile mode it also marks the start
        of a step (``torch.compiler.cudagraph_mark_step_begin``): the next forward may then
        overwrite this one's outputs, so copy what you keep (``loss.item()``, ``.clone()``)."""
        if self._compiled is not None:
            self._compiled.mark_step()
        if self.precision in ("bf16", "fp16"):
            self._ran["autocast"] = True
        with autocast_for(self.precision, self.device.type):
            yield

    def scaler(self) -> torch.amp.GradScaler:
        """The trial's gradient scaler: enabled for fp16 (whose range is too small for the
        gradients), disabled otherwise, where it passes the loss and the step through. One
        per :class:`Switches`; save its ``state_dict()`` with the trial's state."""
        return self._scaler

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, *,
             max_grad_norm: Optional[float] = None) -> None:
        """One optimizer step: backward through the scaled loss, the step (skipped by the
        scaler when fp16 gradients overflowed), the scale's update, and the gradients set to
        None. With ``max_grad_norm``, the gradients are unscaled first and clipped to that
        norm over the optimizer's parameters."""
        scaler = self._scaler
        scaler.scale(loss).backward()
        if max_grad_norm is not None and max_grad_norm > 0:
            scaler.unscale_(optimizer)
            parameters = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def record(self) -> dict[str, Any]:
        """What ran, for trials.parquet: the precision (``fp32`` for bf16/fp16 when
        :meth:`autocast` was never entered), the compile mode (``off`` unless
        :meth:`prepare` compiled), and whether :meth:`prepare` applied channels-last and
        checkpointing."""
        precision = self.precision
        if precision in ("bf16", "fp16") and not self._ran["autocast"]:
            precision = "fp32"
        return {
            "precision_used": precision,
            "compile_used": self._compiled.mode if self._compiled is not None else "off",
            "channels_last": self._ran["channels_last"],
            "gradient_checkpointing": self._ran["gradient_checkpointing"],
        }


def _example_names(model: nn.Module) -> str:
    """A few of the model's top-level submodule names, for an error message."""
    names = [name for name, _ in model.named_children()][:4]
    return f"checkpoint={names}" if names else "a model with submodules"


__all__ = ["Switches"]
