"""Results: Parquet writers and readers (schema in results/README.md). No Ray imports."""

from results.io.files import (
    EPOCHS_FILE,
    METADATA_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    read_experiment,
    write_json_atomic,
    write_parquet_atomic,
)

__all__ = [
    "EPOCHS_FILE",
    "METADATA_FILE",
    "PREDICTIONS_FILE",
    "TRIALS_FILE",
    "read_experiment",
    "write_json_atomic",
    "write_parquet_atomic",
]
