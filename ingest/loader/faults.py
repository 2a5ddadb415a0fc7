"""Fault injection for the crash and speculation tests: one seam, inert unless ``INGEST_FAULTS`` is set.

``INGEST_FAULTS`` is a comma-separated list of faults:

``before-manifest``  (driver SIGKILL) every task succeeded, files are in staging, no manifest yet
``after-manifest``   (driver SIGKILL) the manifest is committed (the commit point), nothing published
``mid-publish``      (driver SIGKILL) the first file of a manifest is published, the rest are not
``after-publish``    (driver SIGKILL) every file is in place, the ``.published`` marker is not written
``before-gc``        (driver SIGKILL) marker written; staging not yet removed, run record not yet final
``checkpoint-written`` (SIGKILL) a checkpoint's files are written, ``_last_checkpoint`` not yet moved
``mid-archive``      (SIGKILL) ``_last_checkpoint`` moved, one covered manifest archived, the others not
``fail-first-attempt``     every Spark task fails on its first attempt after staging its files
                           (so retries must not duplicate)
``slow-first-attempt=N``   the first attempt of task 0 sleeps N ms after staging its files: an
                           outlier against the other tasks' median runtime, so Spark's speculation
                           launches a second attempt that finishes first (speculative copies must
                           never duplicate or add files). Only on a multi-host cluster: Spark never
                           runs two attempts of a task on one host, so on one machine it only
                           marks the task speculatable

A SIGKILL is what an OOM kill or a lost node does: no cleanup, no ``finally``, no atexit.
The spec is parsed once per run (:func:`ingest.loader.job.run_load`) and once per task
(it travels to executors in :class:`~ingest.loader.task.TaskSettings`, so executors obey
the driver's environment); production code calls the hooks of a :class:`Faults` at named
points outside any per-message loop. Never set it in production: it exists to prove the
commit protocol.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Mapping

from ingest.errors import ConfigError

log = logging.getLogger(__name__)

FAULTS_ENV = "INGEST_FAULTS"
CRASH_POINTS = ("before-manifest", "after-manifest", "mid-publish", "after-publish", "before-gc",
                "checkpoint-written", "mid-archive")
FAIL_FIRST_ATTEMPT = "fail-first-attempt"
SLOW_FIRST_ATTEMPT = "slow-first-attempt"


@dataclass(frozen=True, slots=True)
class Faults:
    """The faults a run or task injects; :data:`NO_FAULTS` (every hook a no-op) unless a test asks."""

    crash_at: frozenset[str] = frozenset()
    fail_first_attempt: bool = False
    slow_first_attempt_ms: int = 0
    spec: str = ""

    @classmethod
    def parse(cls, spec: str) -> Faults:
        """Parse an ``INGEST_FAULTS`` value (see the module docstring).

        Raises:
            ConfigError: an item is not a known fault, or a delay is not a whole number of ms.
        """
        if not spec.strip():
            return NO_FAULTS
        crash: set[str] = set()
        fail = False
        slow = 0
        for item in (i.strip() for i in spec.split(",")):
            name, _, value = item.partition("=")
            if item in CRASH_POINTS:
                crash.add(item)
            elif item == FAIL_FIRST_ATTEMPT:
                fail = True
            elif name == SLOW_FIRST_ATTEMPT and value.isdigit():
                slow = int(value)
            elif item:
                raise ConfigError(
                    f"{FAULTS_ENV}: unknown fault {item!r}; known: {', '.join(CRASH_POINTS)}, "
                    f"{FAIL_FIRST_ATTEMPT}, {SLOW_FIRST_ATTEMPT}=<ms>")
        return cls(frozenset(crash), fail, slow, spec.strip())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """The faults ``INGEST_FAULTS`` asks for (:data:`NO_FAULTS` when unset)."""
        return cls.parse((os.environ if environ is None else environ).get(FAULTS_ENV, ""))

    def crash_point(self, name: str) -> None:
        """SIGKILL this process if ``name`` is one of the crash points asked for."""
        if name not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}")
        if name in self.crash_at:
            log.warning("fault injection: SIGKILL at %s (%s=%s)", name, FAULTS_ENV, self.spec)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def task_staged(self, task_id: int, attempt: int, staged_files: int) -> None:
        """Called once per task attempt after its files are staged, before it reports them.

        Raises:
            RuntimeError: ``fail-first-attempt`` and this is a first attempt (Spark retries it).
        """
        if self.slow_first_attempt_ms and attempt == 0 and task_id == 0:
            log.warning("fault injection: first attempt of task %s lingers %d ms after staging",
                        task_id, self.slow_first_attempt_ms)
            time.sleep(self.slow_first_attempt_ms / 1000.0)
        if self.fail_first_attempt and attempt == 0:
            raise RuntimeError(f"fault injection ({FAIL_FIRST_ATTEMPT}): first attempt of task {task_id} "
                               f"fails after staging {staged_files} files")


NO_FAULTS = Faults()


def crash_point(name: str) -> None:
    """:meth:`Faults.crash_point` of ``INGEST_FAULTS``, for code that runs without a run's
    :class:`Faults` at hand (the commit protocol, shared by the loader and compaction)."""
    Faults.from_env().crash_point(name)
