"""A time bound for one call: a call that does not return in time fails the test instead of hanging it.

    from tests.harness.time_bound import within
    result = within(5.0, decode_columns, payloads)

The call runs in a daemon thread; ``within`` waits for it at most ``seconds`` and then raises
``AssertionError`` naming the call and the bound. Its result is returned and its exception
re-raised unchanged. A bound meant for hangs, not a timing: choose it 10-100x above the call's
normal time so that only a hang (a loop that never ends) reaches it, never a slow machine.

Limit: the waiting thread gets the interpreter back only when the call releases the GIL (Python
code does so every switch interval). Compiled code that spins holding the GIL would block the
bound itself: such code needs a child process with a deadline instead.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


def within(seconds: float, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``, failing with ``AssertionError`` when it has not returned after ``seconds``."""
    if not seconds > 0:
        raise ValueError(f"time bound {seconds!r} s: a positive number of seconds is allowed")
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller unchanged
            outcome["error"] = exc

    worker = threading.Thread(target=run, name=f"time-bound {getattr(fn, '__name__', fn)!s}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise AssertionError(f"{getattr(fn, '__qualname__', fn)!s} did not return within {seconds} s "
                             f"(time bound: a hang fails the test)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
