"""The broker's authorizer: super users, the cached ACLs, denials counted and logged.

:meth:`Authorizer.authorize` is what a Kafka API handler asks: may ``principal`` connecting from
``host`` perform ``operation`` on the resource? Super users (``super.users``) may do anything; otherwise
the ACLs of every pattern matching the resource decide (:func:`~ingest.broker.authorizer.acl.decide`).
A denial is counted per (request, resource type, operation) for the metrics
(``ingest_broker_authorization_denials``) and logged through a
:class:`~ingest.ratelimited_log.RateLimitedLog`: the first per client host and reason, then a count.
Checks that only filter what is shown (Metadata of all topics, ListGroups) are neither counted nor
logged, as Kafka's ``logIfDenied=false``.

Thread-safety: any thread may call; the counters are guarded by a lock.
"""
from __future__ import annotations

import logging
import threading

from ingest.broker.authorizer.acl import CLUSTER_NAME, Operation, ResourceType, decide, denied
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

DENIAL_LOG_INTERVAL_S = 30.0


class Authorizer:
    """Decides requests from ``cache``'s ACLs (an :class:`~ingest.broker.authorizer.cache.AclCache`)."""

    def __init__(self, cache, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.cache = cache
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.denials_log = RateLimitedLog(log, interval_s=DENIAL_LOG_INTERVAL_S)
        self._lock = threading.Lock()
        self._denials: dict[tuple[str, str, str], int] = {}

    def authorize(self, principal: str, host: str, operation: Operation, rtype: ResourceType, name: str,
                  request: str = "", audit: bool = True) -> bool:
        """True when allowed; ``request`` names the API for the denial's count and log line, ``audit``
        False for checks that only filter what is shown."""
        if principal in self.super_users:
            return True
        if decide(self.cache.entries(rtype, name), principal, host, operation, self.allow_if_no_acl):
            return True
        if audit:
            self._denied(principal, host, operation, rtype, name, request)
        return False

    def authorize_any(self, principal: str, host: str, operation: Operation, rtype: ResourceType) -> bool:
        """True when some ACL allows ``operation`` on some resource of ``rtype`` and no Deny on every
        resource of the type ("*") refuses it (Kafka's ``authorizeByResourceType``, used by
        InitProducerId: Write on any topic stands for IdempotentWrite)."""
        if principal in self.super_users:
            return True
        if denied(self.cache.wildcard_entries(rtype), principal, host, operation):
            return False
        return any(decide([e], principal, host, operation, False) for e in self.cache.all_entries(rtype))

    def cluster(self, principal: str, host: str, operation: Operation, request: str = "") -> bool:
        return self.authorize(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME, request)

    def refused_identity(self, principal: str, host: str, replica_id: int, registered: str | None,
                         request: str) -> None:
        """A replica request from a principal that is not the one broker ``replica_id`` registered."""
        key = (request, "Replica", Operation.CLUSTER_ACTION.value)
        with self._lock:
            self._denials[key] = self._denials.get(key, 0) + 1
        self.denials_log.warning(host, f"not replica {replica_id}", "principal %s from %s claims to be replica %d, "
                                 "whose registered principal is %s; refused (%s)", principal, host, replica_id,
                                 registered or "unknown (no such live broker)", request)

    def _denied(self, principal: str, host: str, operation: Operation, rtype: ResourceType, name: str,
                request: str) -> None:
        key = (request, rtype.value, operation.value)
        with self._lock:
            self._denials[key] = self._denials.get(key, 0) + 1
        self.denials_log.warning(host, f"denied {principal} {operation.value} {rtype.value}",
                                 "principal %s from %s denied operation %s on %s:%s (%s)", principal, host,
                                 operation.value, rtype.value, name, request or "request")

    def denials(self) -> dict[tuple[str, str, str], int]:
        """(request, resource type, operation) -> how many were denied since start."""
        with self._lock:
            return dict(self._denials)

    def close(self) -> None:
        self.cache.close()
