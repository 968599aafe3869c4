"""Results, in three layers: storage and the Parquet schema (``results.io``, schema in
results/README.md; this package re-exports its files' names), the statistics
(``results.stats``) and the report (``results.report``). No Ray imports."""

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
