"""Results, in three layers: storage and the Parquet schema (``ablations.results.io``, schema in
results/README.md; this package re-exports its files' names), the statistics
(``ablations.results.stats``) and the report (``ablations.results.report``). No Ray imports."""

from ablations.results.io.files import (
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
