"""The controller's fenced ZooKeeper transactions: every decision is a multi that first checks the epoch.

A controller writes each decision in one ZooKeeper transaction whose first operation checks the version of
``/controller_epoch`` it set when it became controller (:mod:`ingest.broker.controller`); a controller that
was replaced meanwhile has the whole transaction refused by ZooKeeper.
"""
from __future__ import annotations

from typing import Callable

from kazoo.exceptions import RolledBackError

from ingest import znodes
from ingest.errors import StaleControllerError


def failed_operation(results: list) -> int | None:
    """The index of the operation that failed a ZooKeeper multi, None when the multi succeeded.

    ZooKeeper answers every operation of a failed multi: those before the failed one as rolled back
    (kazoo's ``RolledBackError``, an exception too), the failed one with its error, those after it as
    ``RuntimeInconsistency``. Only the first error that is not a roll-back says what went wrong: a
    lost version race on a state node fails its ``set_data``, not the epoch ``check`` before it.
    """
    for i, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            return i
    return None


def commit_fenced(client, epoch: int, epoch_version: int, build: Callable[[object], None]) -> bool:
    """Run ``build(tx)`` (which adds the operations) in a transaction fenced by the controller epoch.

    Returns:
        True when it committed, False when one of ``build``'s operations failed (a node changed since it
        was read: read again and decide again).

    Raises:
        StaleControllerError: ``/controller_epoch`` moved on: a newer controller decides.
    """
    def commit():
        tx = client.transaction()
        tx.check(znodes.CONTROLLER_EPOCH, epoch_version)
        build(tx)
        return tx.commit()

    failed = failed_operation(client.retry(commit))
    if failed == 0:
        raise StaleControllerError(
            f"controller epoch {epoch} is no longer current in ZooKeeper; a newer controller decides")
    return failed is None
