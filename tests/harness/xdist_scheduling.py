"""How ``--dist loadgroup`` hands the suite's tests to pytest-xdist's workers: a test file at a time, and
every test marked ``xdist_group(NAME)`` with the others of that NAME, whatever their files.

pytest-xdist's own ``loadgroup`` hands ungrouped tests out one by one, so the module-scoped fixtures
of one file (its brokers, its registry: tests/conftest.py) would be started once in each worker that
runs one of its tests; ``loadfile`` keeps a file on one worker but knows no groups. This scheduling
is both: the unit of work is the file, or the group. A group runs on one worker, its tests one after
the other, never two at once; tests/conftest.py installs it for ``--dist loadgroup`` (the default of
``./scripts/test.sh``). Files go out largest first (pytest-xdist's ``--loadscope-reorder``, on by
default).
"""
from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling


class FileOrGroupScheduling(LoadGroupScheduling):
    """``loadfile`` for ungrouped tests, ``loadgroup`` for grouped ones."""

    def _split_scope(self, nodeid: str) -> str:
        group = super()._split_scope(nodeid)  # the group name when the test has one, else the nodeid
        if group != nodeid:
            return "group " + group
        return nodeid.split("::", 1)[0]
