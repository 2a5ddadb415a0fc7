"""Stop signals of a foreground command: SIGTERM and SIGINT set the event its main loop waits on.

A command that runs until it is told to stop (``ingest broker start``, ``ingest mirror``) calls
:func:`stop_on_signals` once, from the main thread (Python runs signal handlers there), then waits
on the event in short steps so that it can also watch its own threads. The handler only logs the
signal and sets the event: the command stops its service on its own thread, never inside the
handler.
"""
from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


def stop_on_signals() -> threading.Event:
    """An event set (and the signal logged) when the process receives SIGTERM or SIGINT."""
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
