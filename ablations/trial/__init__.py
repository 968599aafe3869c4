"""One trial, PyTorch only (no Ray): the data and its batches (``batches``), the model built
for a config (``model_builder``), one optimiser step with precision, accumulation and
checkpointing (``step``), the metrics of an evaluation (``metrics``), the training loop with its
resumable state and OOM recovery (``loop``), the rule that makes a finished trial ``diverged``
(``divergence``), the auto-batch probe (``memory``) and a trial's estimated cost (``cost``).
``from ablations.trial.loop import train`` runs one trial.
"""
