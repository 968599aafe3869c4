"""Command line: ``run-ablations [COMMAND] ...`` (``python run_ablations.py`` from a checkout),
the subcommands of commands.py. ``run`` (the default: ``run-ablations --space components``)
starts, resumes or plans an experiment (run.py); ``report``, ``compare`` and ``list`` are in
output.py, ``diagnose`` in diagnose.py, the signal handlers in signals.py.

This module parses the command line and loads the subcommand it names: ``--help`` and a bad
flag load neither torch nor pandas, scipy or Ray (a test reads ``sys.modules``).
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from ablations.cli.commands import parse_command
from ablations.cli.console import error_text, print_event
from ablations.cli.flags import EXIT_BAD_INPUT, EXIT_INTERRUPTED, PROG
from ablations.config import ConfigError
from ablations.experiment.core.events import listening
from ablations.experiment.core.request import UsageError
from ablations.results.io.files import MetadataError

def main(argv: Optional[Sequence[str]] = None) -> int:
    """``run-ablations [COMMAND] ...``: the subcommand's exit code (commands.py lists them;
    without one, ``run``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    project_on_path()
    command, args = parse_command(argv)
    if command in ("report", "compare"):
        from ablations.cli.output import compare_main, report_main

        try:
            return (report_main if command == "report" else compare_main)(args)
        except ConfigError as exc:  # a path or value given (report_main names the rest)
            print(f"{PROG} {command}: error: {error_text(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if command == "list":
        from ablations.cli.output import list_spaces

        print(list_spaces())
        return 0
    if command == "diagnose":
        from ablations.cli.diagnose import diagnose_main

        return diagnose_main(args.address)
    from ablations.model.data import DataError

    try:
        with listening(print_event):
            from ablations.cli.run import run_main

            return run_main(args, [PROG, *argv])
    except (ConfigError, DataError, UsageError, MetadataError) as exc:
        print(f"{PROG}: error: {error_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def project_on_path() -> None:
    """The folder the command starts in, first on the module path (as `uvicorn app:app` and
    `celery -A proj` do): a ``--model module:NAME`` or a space file's ``model:`` is found there,
    as Ray's workers find it (Ray puts the driver's folder on their path). The runner imports
    under ``ablations`` only, so the folder's own ``model.py`` or ``utils.py`` shadow nothing of
    it; an ``ablations`` of the folder's own is refused (``check_project_folder``)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)



if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
