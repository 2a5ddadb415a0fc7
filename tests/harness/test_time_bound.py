"""tests/harness/time_bound.py: a call that hangs fails within its bound; a call that returns gives its
value or its exception unchanged."""
from __future__ import annotations

import threading

import pytest

from tests.harness.time_bound import in_child, within


def test_a_call_that_returns_gives_its_value():
    assert within(5.0, sorted, [3, 1, 2]) == [1, 2, 3]
    assert within(5.0, dict, a=1) == {"a": 1}


def test_a_call_that_raises_raises_the_same_exception():
    with pytest.raises(ValueError, match="bad"):
        within(5.0, int, "bad")


def test_a_call_that_does_not_return_fails_the_bound_and_is_then_released():
    release = threading.Event()

    def spin() -> int:
        n = 0
        while not release.is_set():  # a busy loop, as a decoder caught in a cycle would be
            n += 1
        return n

    try:
        with pytest.raises(AssertionError, match=r"spin did not return within 0.3 s"):
            within(0.3, spin)
    finally:
        release.set()  # the loop ends: no thread left behind


def test_a_bound_must_be_positive():
    with pytest.raises(ValueError, match="positive number of seconds"):
        within(0, sorted, [])


@pytest.mark.processes  # a forked child
def test_in_child_gives_the_value_or_the_exception_of_the_call():
    assert in_child(30.0, sorted, [3, 1, 2]) == [1, 2, 3]
    assert in_child(30.0, lambda: (lambda x: x * 2)(21)) == 42  # not picklable: fork needs no pickling
    with pytest.raises(ValueError, match="bad"):
        in_child(30.0, int, "bad")


@pytest.mark.processes  # a forked child
def test_in_child_fails_a_call_that_spins_and_kills_its_child():
    def spin() -> None:
        while True:
            pass

    with pytest.raises(AssertionError, match="did not return within 1.0 s"):
        in_child(1.0, spin)


@pytest.mark.processes  # a forked child
def test_in_child_fails_a_call_that_crashes_its_process():
    import ctypes
    import faulthandler

    def crash():
        faulthandler.disable()      # the crash is meant: no "Fatal Python error" stack in the test log
        ctypes.string_at(0)         # reads address 0: a segfault, as a bad bound in C would

    with pytest.raises(AssertionError, match="signal 11 .SIGSEGV."):
        in_child(30.0, crash)
