"""A time bound for one call: a call that does not return in time fails the test instead of hanging it.

    from tests.harness.time_bound import within
    result = within(5.0, decode_columns, payloads)

The call runs in a daemon thread; ``within`` waits for it at most ``seconds`` and then raises
``AssertionError`` naming the call and the bound. Its result is returned and its exception
re-raised unchanged. A bound meant for hangs, not a timing: choose it 10-100x above the call's
normal time so that only a hang (a loop that never ends) reaches it, never a slow machine.

Limit: the waiting thread gets the interpreter back only when the call releases the GIL (Python
code does so every switch interval). Compiled code that spins holding the GIL would block the
bound itself: such code runs under ``in_child`` instead, a forked child process with a deadline:

    result = in_child(60.0, check_compiled_decoder, schema, seed)

The child is killed at the deadline (``AssertionError``: a hang), a child killed by a signal (a
segfault of compiled code) fails with ``AssertionError`` naming the signal, and otherwise the call's
value or exception comes back pickled (an unpicklable one as ``RuntimeError`` with its repr). The
call's arguments are not pickled (fork): closures and generated functions are fine.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import threading
import time
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


def in_child(seconds: float, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` in a forked child; ``AssertionError`` when it has not returned after
    ``seconds`` (the child is killed) or when the child dies of a signal."""
    if not seconds > 0:
        raise ValueError(f"time bound {seconds!r} s: a positive number of seconds is allowed")
    name = getattr(fn, "__qualname__", fn)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the pickled outcome, leave without pytest's exit handlers
        code = 0
        try:
            os.close(r)
            try:
                outcome = ("value", fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the parent
                outcome = ("error", exc)
            try:
                data = pickle.dumps(outcome)
            except Exception:  # noqa: BLE001 - an unpicklable value or exception
                data = pickle.dumps(("error", RuntimeError(f"unpicklable outcome of {name}: {outcome[1]!r}")))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001 - the parent sees an exit without a result
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pid = 0
                raise AssertionError(f"{name} did not return within {seconds} s in its child process "
                                     f"(time bound: a hang fails the test)")
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise AssertionError(f"{name} killed its child process with signal {sig} ({signal.Signals(sig).name})")
    if not chunks:
        raise AssertionError(f"{name}: the child process exited with {os.waitstatus_to_exitcode(status)} "
                             f"and no result")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise value
    return value
