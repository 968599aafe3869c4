"""Storage: the experiment folder's files, local or at a URI (files.py), and the columns of its
three Parquet files (schema.py, rendered into results/README.md)."""
