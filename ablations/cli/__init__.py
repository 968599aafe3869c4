"""The command line: ``main`` (parse, check, plan, run, print), ``flags`` (argparse),
``output`` (what the console shows, the ``report`` and ``compare`` subcommands), ``resume``
(``--resume``), ``diagnose`` (``--diagnose``) and ``signals`` (SIGTERM as Ctrl-C). Only this
layer prints errors, exits the process or installs signal handlers."""
