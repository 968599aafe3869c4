"""The columns of the three Parquet files, documented in one place.

``results/README.md`` renders these tables; a test checks that the files written by a real run
have every column listed here, and that the README lists every column.
"""

from __future__ import annotations

from ablations.config import TrialConfig

# (name, dtype, description). Config columns of trials.parquet come from TrialConfig's fields.
TRIAL_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name (the folder name)"),
    ("space", "string", "search space the trial belongs to, e.g. components"),
    ("trial_name", "string", "unique within the experiment: <ablation>-seed<seed>"),
    ("trial_id", "string", "Ray Tune's trial id"),
    ("status", "string", "ok / failed / diverged"),
    ("error", "string", "one-line error for failed and diverged trials, else null"),
    ("epochs_run", "int64", "epochs completed"),
    ("train_loss", "float64", "last epoch's mean training loss (NLL or MSE, standardised units)"),
    ("val_loss", "float64", "last epoch's validation loss, same units as train_loss"),
    ("val_mae", "float64", "last epoch's validation MAE, km"),
    ("val_rmse", "float64", "validation RMSE, km"),
    ("val_r2", "float64", "validation coefficient of determination"),
    ("val_nll", "float64", "validation Gaussian NLL per sample in km units (null: point head)"),
    ("val_coverage_90", "float64", "share of val targets inside the central 90% interval"),
    ("test_mae", "float64", "test MAE after the last epoch, km"),
    ("test_rmse", "float64", "test RMSE, km"),
    ("test_r2", "float64", "test coefficient of determination"),
    ("test_nll", "float64", "test Gaussian NLL per sample, km units (null: point head)"),
    ("test_coverage_90", "float64", "share of test targets inside the central 90% interval"),
    ("wall_s", "float64", "trial wall time inside the worker: data, model, training, evaluation"),
    ("train_samples_per_s", "float64", "median training throughput over epochs after the first"),
    ("peak_mem_mb", "float64", "peak RSS of the worker process (CPU) or CUDA max allocated (GPU)"),
    ("device_used", "string", "cpu / cuda"),
    ("data_source", "string", "synthetic:<key of its parameters> or the data directory"),
    ("torch_version", "string", "torch.__version__ in the driver"),
    ("ray_version", "string", "ray.__version__ in the driver"),
    ("python_version", "string", "Python version in the driver"),
    ("git_commit", "string", "commit of this code (with -dirty if modified), null outside git"),
]

EPOCH_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name"),
    ("trial_name", "string", "as in trials.parquet"),
    ("ablation", "string", "variant name"),
    ("seed", "int64", "trial seed"),
    ("epoch", "int64", "1-based epoch"),
    ("train_loss", "float64", "mean training loss of the epoch"),
    ("val_loss", "float64", "validation loss"),
    ("val_mae", "float64", "validation MAE, km"),
    ("val_rmse", "float64", "validation RMSE, km"),
    ("val_r2", "float64", "validation R²"),
    ("val_nll", "float64", "validation Gaussian NLL, km units (null: point head)"),
    ("val_coverage_90", "float64", "validation 90% interval coverage (null: point head)"),
    ("lr", "float64", "learning rate at the end of the epoch"),
    ("epoch_s", "float64", "seconds for the epoch, training and validation"),
    ("train_samples_per_s", "float64", "training throughput of the epoch"),
]

PREDICTION_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name"),
    ("trial_name", "string", "as in trials.parquet"),
    ("ablation", "string", "variant name"),
    ("seed", "int64", "trial seed"),
    ("sample_index", "int64", "row of the sample in the dataset (table.parquet order)"),
    ("target", "float64", "true target, km"),
    ("pred_mean", "float64", "predicted mean, km"),
    ("pred_std", "float64", "predicted standard deviation, km (null: point head)"),
]
# Plus one column per stratum of the data, named ``stratum_<column>``: for the synthetic set
# stratum_regime, stratum_speed_px_per_frame, stratum_blob_sigma_px; for a file dataset every
# column of table.parquet other than target, split and scalar_*.

CONFIG_COLUMNS: list[str] = list(TrialConfig.__dataclass_fields__)


def column_names(columns: list[tuple[str, str, str]]) -> list[str]:
    return [name for name, _, _ in columns]
