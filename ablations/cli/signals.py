"""Signals, the command line's alone: SIGTERM (what ``timeout``, batch schedulers and
``docker stop`` send) does what Ctrl-C does. Inside ``Tuner.fit`` (:func:`sigterm_as_sigint`,
the runner's ``RunOptions.fit_guard``) Tune stops the trials and saves its state; outside it
(:func:`sigterm_is_ctrl_c`) it raises KeyboardInterrupt. The library installs no handler."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator

from ablations.cli.console import spoken
from ablations.experiment.execution.interrupt import resume_command
from ablations.experiment.core.options import RunOptions

# After SIGTERM, how long Tune may take to stop the trials and save its state (3-5 s measured
# on 2 busy cores) before the driver gives up on a Ray that the same signal stopped.
STOP_GRACE_S = 15.0
STOP_GRACE_ENV = "ABLATIONS_STOP_GRACE_S"  # overrides it (seconds)


@contextlib.contextmanager
def sigterm_as_sigint(options: RunOptions) -> Iterator[None]:
    """While it is open, SIGTERM (what ``timeout``, batch schedulers and ``docker stop`` send)
    does what Ctrl-C does: inside ``Tuner.fit`` Tune's SIGINT handler stops the trials, saves
    the experiment state and returns (and the runner ends what the trials' programs left
    running); a second signal raises KeyboardInterrupt. Without it,
    the handler of Ray's core worker prints a native stack dump and aborts the driver.

    ``timeout`` and schedulers signal the whole process group, and the processes of a local
    Ray (which block SIGINT, not SIGTERM) stop too: Tune then waits a minute on the dead Ray
    before Ray aborts the driver. If the stop has not finished after ``STOP_GRACE_S``, the
    driver exits (130) with the resume command; the trials' saved state is kept (``--resume``
    continues from it and Tune's last periodic snapshot)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    finished = threading.Event()
    grace_s = float(os.environ.get(STOP_GRACE_ENV, STOP_GRACE_S))

    def give_up() -> None:
        if not finished.wait(grace_s):
            try:  # what the runner does when fit returns: the trials' programs ended
                from ablations.experiment.execution.runner import end_local_programs

                end_local_programs(options)
            except Exception:  # noqa: BLE001 - nothing may keep the driver from exiting
                pass
            print(f"\nStopped; Ray did not answer within {grace_s:g} s (the signal "
                  "stopped it too), so no results were written. The trials' saved state is "
                  "kept; continue with: "
                  + spoken(resume_command(str(options.storage), options.name,
                                          options.address)),
                  file=sys.stderr, flush=True)
            os._exit(130)

    def forward(signum: int, frame: Any) -> None:
        if options.address is None:  # only a local Ray can have died of the same signal; a
            # cluster's stop (trials saving, state syncing to storage) takes the time it takes
            threading.Thread(target=give_up, name="sigterm-grace", daemon=True).start()
        handler = signal.getsignal(signal.SIGINT)  # Tune's during fit, Python's outside it
        if not callable(handler):
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        finished.set()
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def sigterm_is_ctrl_c() -> Any:
    """SIGTERM raises KeyboardInterrupt from now on (main thread only); returns the handler
    to restore, None when not in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return signal.SIG_DFL if previous is None else previous  # None: set outside Python
