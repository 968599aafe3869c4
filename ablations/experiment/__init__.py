"""An experiment on Ray Tune, in parts by what each does (each a layer, lowest first:
tests/test_layers.py): ``core/`` (the request, its groups, the events, the run's options),
``provenance/`` (fingerprints, the trial store, experiment.json), ``planning/`` (a table's
cells and trials on each dataset), ``execution/`` (Ray Tune: the runner, the trainable, the
tables), ``designs/`` (the run kinds: a table, a factorial design, a search, rounds, tuned
ablations) and ``trackers/``. Here, above them, the library: ``api.Experiment`` (its entry
point), ``prepare`` (the request to a design and its trials), ``execute``, ``resuming`` and
``continuing`` (a stopped or undecided experiment taken further).
"""
