"""Experiment trackers (MLflow, Weights & Biases) through Ray Tune's logger callbacks:
``specs`` parses ``--log-to`` and builds the callbacks, ``runs`` holds the callbacks."""
