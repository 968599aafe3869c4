"""The command line: ``main`` (parse, check, plan, run, print), ``commands`` (the
subcommands run, report, compare, list, diagnose and their parsers), ``flags`` (run's flags and
the value types), ``output`` (what the console shows, the ``report``, ``compare`` and ``list``
subcommands), ``resume`` (``--resume``), ``diagnose`` (the ``diagnose`` subcommand) and
``signals`` (SIGTERM as Ctrl-C). Only this layer prints errors, exits the process or installs
signal handlers."""
