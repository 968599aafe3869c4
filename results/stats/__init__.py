"""Statistics: pure pandas/numpy/scipy functions from an experiment's tables to its verdicts,
effects, strata and sequential decisions. No Ray, no files written here."""
