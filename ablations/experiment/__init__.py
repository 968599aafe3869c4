"""An experiment on Ray Tune: the typed request and its planning (``request``, ``planning``),
the runner (``runner``: Ray, the Tuner, experiment.json), the run kinds as designs
(``designs/``: a grid, a factorial design, the ``hpo`` search, ``--seeds auto`` rounds, the
stages of tuned ablations), the Tune trainable, the result tables (``tables``), progress,
interrupt, provenance, cluster checks, the pre-flight checks and the trackers
(``trackers/``). ``api.Experiment`` is the library's entry point.
"""
