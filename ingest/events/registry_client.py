"""Client of the schema registry's REST API, with an id cache.

Schemas by id are cached forever (ids are immutable); registrations are
cached per (subject, canonical schema), so a producer pays one HTTP round trip
per schema, not per event. Stdlib ``urllib`` only, so Spark executors need
nothing extra.

Every request this client makes is idempotent (registering a schema that is
already registered returns its id), so a request that fails for a reason a
retry can cure (connection refused or reset, a timeout, HTTP 5xx) is retried
with exponential back-off: ``retries`` more attempts, the first after
``backoff_s``, doubling up to ``max_backoff_s`` (defaults: 6 retries spread over
about 6 s, which outlasts a registry restart). A 4xx answer is final.

Security (``auth``, :class:`~ingest.registry_client_config.RegistryAuth`): HTTP basic
credentials (``basic.auth.user.info``, or ``user:password@`` in the URL, which is then removed
from :attr:`url` so that no message shows it) and, for an ``https://`` URL, TLS with host-name
checks against ``schema.registry.ssl.ca.location``. A refusal (401, 403) and a certificate that
fails verification are final, not retried.

Concurrency contract: thread-safe; the caches are dicts filled idempotently
(two threads may both fetch the same id once; they store equal values).
"""
from __future__ import annotations

import http.client
import json
import logging
import random
import ssl
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ingest.errors import (IncompatibleSchemaError, RegistryUnavailableError, SchemaError,
                           SchemaNotFoundError)
from ingest.events.registry_references import inline, named_definitions
from ingest.events.schemas import canonical
from ingest.registry_client_config import NO_AUTH, RegistryAuth

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    """Register schemas and look them up by id (see docs/events.md for the API)."""

    def __init__(self, url: str, timeout_s: float = 10.0, *, retries: int = 6, backoff_s: float = 0.1,
                 max_backoff_s: float = 2.0, auth: RegistryAuth = NO_AUTH) -> None:
        url, url_user_info = _split_user_info(url)
        if not url.startswith(("http://", "https://")):
            raise SchemaError(f"registry URL {url!r} must start with http:// or https://")
        if retries < 0 or backoff_s < 0 or max_backoff_s < backoff_s:
            raise SchemaError(f"registry client retries={retries} backoff_s={backoff_s} max_backoff_s={max_backoff_s}: "
                              "retries and backoff_s must be >= 0 and max_backoff_s >= backoff_s")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._by_id: dict[int, dict] = {}
        self._registered: dict[tuple[str, str], int] = {}
        self._headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        self._headers.update(auth.headers(url_user_info))
        self._auth = auth
        self._tls = auth.ssl_context() if self.url.startswith("https://") else None

    def __repr__(self) -> str:
        return f"RegistryClient({self.url!r})"

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        """One idempotent request, retried with back-off while the failure is one a retry can cure."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                return self._request_once(method, path, body)
            except RegistryUnavailableError as exc:
                if attempt == self.retries:
                    raise
                log.info("%s; retry %d of %d in %.2fs", exc, attempt + 1, self.retries, delay)
                time.sleep(delay * random.uniform(0.5, 1.0))  # jitter: concurrent clients do not retry in step
                delay = min(delay * 2, self.max_backoff_s)
        raise AssertionError("unreachable")

    def _request_once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._tls) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())
                code, message = err.get("error_code"), err.get("message")
            except (ValueError, AttributeError):
                code, message = exc.code, exc.reason
            text = f"registry {self.url}: {method} {path}: HTTP {exc.code} (error_code {code}): {message}"
            if exc.code == 404:
                raise SchemaNotFoundError(text) from None
            if exc.code == 409:
                raise IncompatibleSchemaError(text) from None
            if exc.code >= 500:
                raise RegistryUnavailableError(text) from None
            if exc.code in (401, 403):
                raise SchemaError(f"{text} (check basic.auth.user.info: the registry "
                                  f"{'does not know these credentials' if exc.code == 401 else 'lets this user only read'})") from None
            raise SchemaError(text) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc  # (an SSLError's reason is text)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise SchemaError(f"schema registry {self.url}: its certificate is not trusted ({reason.verify_message}); "
                                  "check schema.registry.ssl.ca.location") from None
            if isinstance(reason, ssl.SSLError) and not isinstance(reason, ssl.SSLEOFError):
                raise SchemaError(f"schema registry {self.url}: TLS refused ({reason}); check the schema.registry.ssl.* "
                                  "keys (a registry with ssl.client.authentication needs this client's certificate)") \
                    from None
            raise RegistryUnavailableError(
                f"schema registry {self.url} unreachable ({method} {path}): {reason}; "
                "is `ingest registry start` running there?") from exc

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_tls"] = None if self._tls is None else True  # an SSLContext does not pickle: made again
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._tls is not None:
            self._tls = self._auth.ssl_context()

    def register(self, subject: str, schema: dict | str) -> int:
        """Register ``schema`` under ``subject``; returns its id (cached).

        Raises:
            IncompatibleSchemaError: the subject's compatibility level refuses it.
            SchemaError: the schema does not parse.
            RegistryUnavailableError: the registry cannot be reached.
        """
        text = canonical(schema)
        key = (subject, text)
        if key in self._registered:
            return self._registered[key]
        result = self._request("POST", f"/subjects/{quote(subject, safe='')}/versions", {"schema": text})
        schema_id = int(result["id"])
        self._registered[key] = schema_id
        self._by_id.setdefault(schema_id, json.loads(text))
        return schema_id

    def get_schema(self, schema_id: int) -> dict:
        """The schema with this id, parsed and self-contained; fetched once, cached forever.

        A schema with references (named types defined in other subjects' versions) comes
        back with those definitions inlined, so any Avro reader decodes with it alone.

        Raises:
            SchemaNotFoundError: no schema has this id (or a version it refers to is gone).
        """
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        result = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        schema = self._resolve(json.loads(result["schema"]), result.get("references") or [], set())
        self._by_id[schema_id] = schema
        return schema

    def _resolve(self, schema: Any, references: list[dict], seen: set[tuple[str, int]]) -> Any:
        """``schema`` with the definitions of its ``references`` inlined (each fetched once per call)."""
        definitions: dict[str, Any] = {}
        for ref in references:
            key = (str(ref["subject"]), int(ref["version"]))
            if key in seen:
                continue
            seen.add(key)
            r = self._request("GET", f"/subjects/{quote(key[0], safe='')}/versions/{key[1]}?deleted=true")
            referenced = self._resolve(json.loads(r["schema"]), r.get("references") or [], seen)
            for name, definition in named_definitions(referenced).items():
                definitions.setdefault(name, definition)
        return inline(schema, definitions) if definitions else schema

    def subjects(self) -> list[str]:
        return list(self._request("GET", "/subjects"))

    def versions(self, subject: str) -> list[int]:
        return list(self._request("GET", f"/subjects/{quote(subject, safe='')}/versions"))

    def latest(self, subject: str) -> tuple[int, dict]:
        """(id, schema) of the subject's latest version."""
        r = self._request("GET", f"/subjects/{quote(subject, safe='')}/versions/latest")
        return int(r["id"]), json.loads(r["schema"])

    def get_compatibility(self, subject: str | None = None) -> str:
        """The subject's level, or the global one when it has none (``defaultToGlobal=true``)."""
        path = "/config" if subject is None else f"/config/{quote(subject, safe='')}?defaultToGlobal=true"
        return str(self._request("GET", path)["compatibilityLevel"])

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{quote(subject, safe='')}"
        return str(self._request("PUT", path, {"compatibility": level})["compatibility"])


def _split_user_info(url: str) -> tuple[str, str]:
    """(URL without ``user:password@``, ``user:password`` or "") of a registry URL."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, ""
    user_info, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=host)), unquote(user_info)
