"""Development tools, not installed with the package: the simulations that validate the
verdicts' error rates (``python -m tools.failure_simulation``) and the report's browser check."""
