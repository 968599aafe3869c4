"""A table's trials before any runs: its cells and seeds (``cells``), each trial validated
against the device and the data on each dataset (``table_plan``, ``datasets_plan``), own
code's command and metric (``own_code_plan``) and the checks before Ray starts
(``preflight``). The designs plan through these; ``experiment.prepare`` chooses the design."""
