"""Numeric command-line flags: argparse types that read numbers as config values are read (ASCII digits).

Python's ``int()`` and ``float()`` also take other scripts' digits (``"４"`` is 4), ``_``
separators and (``float``) ``nan`` and ``inf``, so a flag declared ``type=int`` accepted what the
same number in a config file is refused for. Every numeric flag of ``ingest`` and of ``jobs/``
reads its value with :func:`ingest.config.parse_int` or :func:`ingest.config.parse_float`: through
:func:`int_flag` or :func:`float_flag` as its argparse ``type``, or in the command where the value
may also be something else (a time: epoch ms or ISO 8601). A value the types refuse is argparse's
usage error (exit 2), naming the flag, the value and what the flag allows::

    ingest produce: error: argument --count: '４' is not an integer: allowed is an integer >= 0; it
    contains U+FF14 FULLWIDTH DIGIT FOUR (write numbers with ASCII digits 0-9)

Ranges stay with the command that knows what the number means (it refuses a value outside them
with its own one-line error).
"""
from __future__ import annotations

import argparse
from typing import Callable

from ingest.config import non_ascii_note, parse_float, parse_int


def int_flag(allowed: str) -> Callable[[str], int]:
    """An argparse ``type``: an integer of ASCII digits; ``allowed`` says what the flag takes."""

    def parse(text: str) -> int:
        try:
            return parse_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer: allowed is {allowed}{non_ascii_note(text)}") from None

    parse.__name__ = "integer"   # argparse names the type by it in some messages
    return parse


def float_flag(allowed: str) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of ASCII digits; ``allowed`` says what the flag takes."""

    def parse(text: str) -> float:
        try:
            return parse_float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number: allowed is {allowed}{non_ascii_note(text)}") from None

    parse.__name__ = "number"
    return parse
