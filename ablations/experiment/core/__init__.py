"""What passes between the experiment's parts: the request (``request``: its fields, its
checks, ``UsageError``), its groups and the results (``groups``), the events the library emits
(``events``), how a run runs and what it returns (``options``), a trial's plan as
experiment.json keeps it (``plans``) and the built-in designs' options (``design_options``).
It imports nothing else of the experiment."""
