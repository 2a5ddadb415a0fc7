"""HTTP basic authentication and read/write roles of the registry's REST API (Confluent's keys).

``authentication.method=BASIC`` turns it on (``NONE``, the default, serves everyone as
today). Every request must then carry ``Authorization: Basic base64(user:password)`` of a user
of ``authentication.users.file`` (:mod:`ingest.events.registry_users`) who holds one of
``authentication.roles`` (``*``: any role, Confluent's default). Otherwise the answer is
``401`` with ``WWW-Authenticate: Basic realm="<authentication.realm>"`` and Confluent's body
``{"error_code": 401, "message": "Unauthorized"}``, whatever the path.

Roles: a request that changes the registry (register, delete, set a compatibility level or a
mode) needs one of ``authorization.write.roles`` (default ``admin``); other principals only
read. Reads are every GET/HEAD plus the two POSTs that change nothing: looking a schema up
in a subject and testing compatibility (as Confluent's RBAC counts them, ``SUBJECT_READ`` and
``SUBJECT_COMPATIBILITY_READ``), so a read-only consumer with confluent-kafka's
``AvroSerializer(auto.register.schemas=False)`` works. A refused write answers ``403`` and
``{"error_code": 40301, "message": "User alice is denied operation Write on ..."}``
(Confluent's RBAC code and wording).

Refusals are logged rate-limited per client host (:class:`~ingest.ratelimited_log.RateLimitedLog`);
passwords are never logged, user names are.
"""
from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from ingest.errors import ConfigError, RegistryHttpError
from ingest.events.registry_users import UserStore
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

WRITE_ENDPOINTS = frozenset({"register", "delete_subject", "delete_version", "put_config", "delete_config",
                             "put_mode", "delete_mode"})
"""Route names (:data:`ingest.events.registry_api.ROUTES`) that change the registry."""

UNAUTHORIZED_CODE = 401
FORBIDDEN_CODE = 40301

_refusals = RateLimitedLog(log)


class Unauthorized(RegistryHttpError):
    """401: no credentials, unknown user, wrong password, or a role not allowed in."""

    def __init__(self, realm: str) -> None:
        super().__init__(401, UNAUTHORIZED_CODE, "Unauthorized")
        self.headers = [("WWW-Authenticate", f'Basic realm="{realm}"')]


@dataclass(frozen=True)
class Principal:
    user: str
    roles: frozenset[str]


class BasicAuth:
    """Who a request is (:meth:`authenticate`) and whether they may call an endpoint (:meth:`authorize`)."""

    def __init__(self, users: UserStore, *, realm: str, roles: tuple[str, ...], write_roles: tuple[str, ...]) -> None:
        self.users = users
        self.realm = realm
        self.roles = frozenset(roles)
        self.write_roles = frozenset(write_roles)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "BasicAuth | None":
        """The check ``config`` asks for (None for ``authentication.method=NONE``).

        Raises:
            ConfigError: BASIC without ``authentication.users.file``, or a bad users file.
        """
        if config["authentication.method"] == "NONE":
            return None
        path = config["authentication.users.file"]
        if not path:
            raise ConfigError("authentication.method=BASIC needs authentication.users.file: the users file "
                              "(lines 'user: PBKDF2-SHA256:...,role'; `ingest registry passwd` writes them)")
        users = UserStore(path)
        log.info("schema registry: HTTP basic authentication, %d users from %s, roles allowed: %s, "
                 "write roles: %s", len(users), path, ",".join(config["authentication.roles"]),
                 ",".join(config["authorization.write.roles"]))
        return cls(users, realm=config["authentication.realm"], roles=tuple(config["authentication.roles"]),
                   write_roles=tuple(config["authorization.write.roles"]))

    def authenticate(self, environ: dict) -> Principal:
        """The principal of a request.

        Raises:
            Unauthorized: no or malformed credentials, unknown user, wrong password, no allowed role.
        """
        client = _client(environ)
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            _refusals.warning(client, "no credentials", "refused a request from %s without basic credentials "
                              "(401)", client)
            raise Unauthorized(self.realm)
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            user, sep, password = "", "", ""
        if not sep:
            _refusals.warning(client, "bad credentials", "refused a request from %s: its Authorization header is "
                              "not base64 of user:password (401)", client)
            raise Unauthorized(self.realm)
        roles = self.users.authenticate(user, password)
        if roles is None:
            _refusals.warning(client, "wrong password", "refused a request from %s: unknown user or wrong password "
                              "for user %r (401)", client, user[:100])
            raise Unauthorized(self.realm)
        if "*" not in self.roles and not roles & self.roles:
            _refusals.warning(client, "role not allowed", "refused user %r from %s: none of its roles is in "
                              "authentication.roles (401)", user, client)
            raise Unauthorized(self.realm)
        return Principal(user, roles)

    def authorize(self, principal: Principal, endpoint: str, method: str, path: str, environ: dict) -> None:
        """Raises:
            RegistryHttpError: 403, the endpoint changes the registry and the principal has no write role.
        """
        if endpoint not in WRITE_ENDPOINTS or principal.roles & self.write_roles:
            return
        client = _client(environ)
        _refusals.warning(client, "read-only", "refused %s %s of user %r from %s: it changes the registry and "
                          "the user has none of authorization.write.roles (403)", method, path[:200],
                          principal.user, client)
        raise RegistryHttpError(403, FORBIDDEN_CODE, f"User {principal.user} is denied operation Write on "
                                                     f"{method} {path[:200]}")


def _client(environ: dict) -> str:
    return f"{environ.get('REMOTE_ADDR', '?')}:{environ.get('REMOTE_PORT', '?')}"
