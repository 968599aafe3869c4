"""Ctrl-C to a run in this process at a chosen point, for the tests of what a stopped run leaves
and how ``--resume`` continues it (runs through ``run_here`` or ``Experiment``, on the test
worker's shared Ray), as Ray Tune's own tests stop a run in their process and restore it there.

Ctrl-C is SIGINT to the driver: inside ``Tuner.fit`` Tune's stop handler
(``signal_interrupt_tune_run``) stops the trials, saves the experiment's state and returns, and the
runner writes the stopped run's tables (ablations/experiment/execution/interrupt.py). What a signal
does to a process of its own (SIGINT to a process group as a terminal sends it, SIGTERM to the
driver alone, Ray's native stack dump) is tests/test_interrupt.py's, with real processes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

TUNE_STOP_HANDLER = "signal_interrupt_tune_run"  # ray/tune/tune.py's SIGINT/SIGUSR1 handler


@dataclass
class Stop:
    """Whether :func:`ctrl_c_when` sent its Ctrl-C."""

    sent: bool = False


@contextlib.contextmanager
def ctrl_c_when(ready: Callable[[], bool], *, poll_s: float = 0.02) -> Iterator[Stop]:
    """While open: once ``ready()`` holds (e.g. a trial of the stage to stop has saved an
    epoch), SIGINT to this process's main thread, once, as a terminal's Ctrl-C reaches the
    driver. Sent only while Tune's stop handler is SIGINT's, never while Python's own would
    raise KeyboardInterrupt in the test; none is sent once the block has ended. Yields a
    :class:`Stop` that says whether it was sent."""
    stop, closed, lock = Stop(), threading.Event(), threading.Lock()
    main = threading.main_thread().ident

    def holds() -> bool:
        try:
            return bool(ready())
        except OSError:  # a folder it reads removed meanwhile: not yet
            return False

    def watch() -> None:
        while not closed.wait(poll_s):
            handler = signal.getsignal(signal.SIGINT)
            if getattr(handler, "__name__", "") != TUNE_STOP_HANDLER or not holds():
                continue
            with lock:
                if not closed.is_set():
                    signal.pthread_kill(main, signal.SIGINT)
                    stop.sent = True
            return

    watcher = threading.Thread(target=watch, name="ctrl-c-when", daemon=True)
    watcher.start()
    try:
        yield stop
    finally:
        with lock:
            closed.set()
        watcher.join()
