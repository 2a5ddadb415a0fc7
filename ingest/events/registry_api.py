"""The registry's REST API as a WSGI application: Confluent's routes, JSON in and out.

Routes (bodies, query parameters and errors as Confluent's Schema Registry, so its clients work)::

    POST   /subjects/{s}/versions                 {"schema", "references"?, "id"?, "version"?} -> {"id": N}
    POST   /subjects/{s}[?deleted=true]           {"schema", "references"?} -> {"subject", "version", "id", "schema"}
    GET    /subjects[?subjectPrefix=P&deleted=true&deletedOnly=true&offset=&limit=] -> ["s", ...]
    GET    /subjects/{s}/versions[?deleted=true&deletedOnly=true]      -> [1, 2, ...]
    GET    /subjects/{s}/versions/{v|latest}[?deleted=true]  -> {"subject", "version", "id", "schema"[, "references"]}
    GET    /subjects/{s}/versions/{v|latest}/schema          -> the schema itself
    GET    /subjects/{s}/versions/{v|latest}/referencedby[?deleted=true]  -> [ids of schemas referring to it]
    DELETE /subjects/{s}/versions/{v|latest}[?permanent=true]    -> v
    DELETE /subjects/{s}[?permanent=true]                        -> [versions deleted]
    GET    /schemas[?subjectPrefix=P&deleted=true&latestOnly=true&offset=&limit=] -> [{"subject", "version", "id", "schema"}]
    GET    /schemas/ids/{id}                      -> {"schema": "<schema JSON string>"[, "references"]}
    GET    /schemas/ids/{id}/schema               -> the schema itself
    GET    /schemas/ids/{id}/versions[?deleted=true]  -> [{"subject", "version"}, ...]
    GET    /schemas/ids/{id}/subjects[?deleted=true]  -> ["s", ...]
    GET    /schemas/types                         -> ["AVRO"]
    POST   /compatibility/subjects/{s}/versions/{v|latest}[?verbose=true] -> {"is_compatible": bool[, "messages"]}
    POST   /compatibility/subjects/{s}/versions[?verbose=true]            -> the same, against the level's versions
    GET    /config  |  /config/{s}[?defaultToGlobal=true]  -> {"compatibilityLevel": "BACKWARD"}
    PUT    /config  |  /config/{s}                {"compatibility": "FULL"} -> {"compatibility": "FULL"}
    DELETE /config  |  /config/{s}                -> {"compatibilityLevel": <the level it had>}
    GET    /mode    |  /mode/{s}[?defaultToGlobal=true]    -> {"mode": "READWRITE"}
    PUT    /mode    |  /mode/{s}[?force=true]     {"mode": "IMPORT"} -> {"mode": "IMPORT"}
    DELETE /mode    |  /mode/{s}                  -> {"mode": <the mode it had>}
    GET    /contexts[?offset=&limit=]             -> ["."]

Errors: HTTP status with body ``{"error_code": N, "message": "..."}`` (codes in
:mod:`ingest.events.registry`); an unknown path is ``404``/``{"error_code": 404}``,
a known path with another method ``405``/``{"error_code": 405}``, a body that is
not JSON (or nests past Python's stack) ``400``/``{"error_code": 400}`` (as
Confluent's REST layer answers). Boolean query parameters are true when they read
``true`` in any case (Java's ``Boolean.parseBoolean``, what Confluent's JAX-RS
resources use).

Security (:mod:`ingest.events.registry_auth`): with ``authentication.method=BASIC`` every
request is authenticated first (401 before anything else is looked at, unknown paths
included), then a request to an endpoint that changes the registry is authorized against
the write roles (403).

Metrics (``metrics.port``, :mod:`ingest.metrics.registry`): each routed request is
counted and timed under its route name.

Concurrency contract: the application is called from the server's worker threads at
once; it keeps no state of its own and the registry object is thread-safe.
"""
from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, unquote, urlsplit

from ingest.errors import RegistryHttpError
from ingest.events.registry import SchemaRegistry
from ingest.events.registry_auth import BasicAuth
from ingest.metrics.registry import RegistryMetrics

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY = 16 * 1024 * 1024
DEFAULT_CONTEXT = "."

_S = r"(?P<subject>[^/]+)"
_V = r"(?P<version>[^/]+)"
_ID = r"(?P<id>[^/]+)"
ROUTES: list[tuple[str, re.Pattern, str]] = [(m, re.compile(f"^{p}/?$"), name) for m, p, name in [
    ("GET", "", "root"),
    ("POST", f"/subjects/{_S}/versions", "register"),
    ("POST", f"/subjects/{_S}", "lookup"),
    ("DELETE", f"/subjects/{_S}", "delete_subject"),
    ("GET", "/schemas", "schemas"),
    ("GET", f"/schemas/ids/{_ID}", "schema_by_id"),
    ("GET", f"/schemas/ids/{_ID}/schema", "schema_text_by_id"),
    ("GET", f"/schemas/ids/{_ID}/versions", "schema_versions"),
    ("GET", f"/schemas/ids/{_ID}/subjects", "schema_subjects"),
    ("GET", "/schemas/types", "schema_types"),
    ("GET", "/subjects", "subjects"),
    ("GET", f"/subjects/{_S}/versions", "versions"),
    ("GET", f"/subjects/{_S}/versions/{_V}", "version"),
    ("DELETE", f"/subjects/{_S}/versions/{_V}", "delete_version"),
    ("GET", f"/subjects/{_S}/versions/{_V}/schema", "version_schema"),
    ("GET", f"/subjects/{_S}/versions/{_V}/referencedby", "referenced_by"),
    ("POST", f"/compatibility/subjects/{_S}/versions/{_V}", "compatibility"),
    ("POST", f"/compatibility/subjects/{_S}/versions", "compatibility"),
    ("GET", "/config", "get_config"),
    ("PUT", "/config", "put_config"),
    ("DELETE", "/config", "delete_config"),
    ("GET", f"/config/{_S}", "get_config"),
    ("PUT", f"/config/{_S}", "put_config"),
    ("DELETE", f"/config/{_S}", "delete_config"),
    ("GET", "/mode", "get_mode"),
    ("PUT", "/mode", "put_mode"),
    ("DELETE", "/mode", "delete_mode"),
    ("GET", f"/mode/{_S}", "get_mode"),
    ("PUT", f"/mode/{_S}", "put_mode"),
    ("DELETE", f"/mode/{_S}", "delete_mode"),
    ("GET", "/contexts", "contexts"),
]]


def _flag(q: dict, name: str) -> bool:
    """A boolean query parameter: true iff it reads ``true`` in any case (Java's parseBoolean)."""
    return q.get(name, "").lower() == "true"


def _deleted_only(q: dict) -> bool:
    """``deletedOnly``, Confluent's name, or ``deleted_only``, the name confluent-kafka's client sends."""
    return _flag(q, "deletedOnly") or _flag(q, "deleted_only")


def _page(q: dict, items: list) -> list:
    """Confluent's ``offset`` / ``limit`` (negative limit: no limit) over a list."""
    try:
        offset, limit = int(q.get("offset", 0)), int(q.get("limit", -1))
    except ValueError:
        raise RegistryHttpError(400, 400, f"offset={q.get('offset')!r} limit={q.get('limit')!r}: "
                                          "both must be integers") from None
    items = items[max(offset, 0):]
    return items if limit < 0 else items[:limit]


def _schema_id(p: dict) -> int:
    try:
        return int(p["id"])
    except ValueError:
        raise RegistryHttpError(404, 40403, f"Schema {p['id']} not found") from None


def _prefix(q: dict) -> str:
    prefix = q.get("subjectPrefix", "")
    return "" if prefix == ":*:" else prefix  # Confluent's default: every context


class _Api:
    """Route handlers: (path params, JSON body, query params) -> JSON-able result."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.r = registry

    @staticmethod
    def _body(body: Any) -> dict:
        if not isinstance(body, dict) or "schema" not in body:
            raise RegistryHttpError(422, 42201, "request body must be a JSON object with a 'schema' string")
        if str(body.get("schemaType") or "AVRO").upper() != "AVRO":
            raise RegistryHttpError(422, 42201, f"schemaType {body['schemaType']!r} is not supported; only AVRO")
        return body

    @staticmethod
    def _optional_int(body: dict, key: str) -> int | None:
        value = body.get(key)
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
            return None  # Confluent's clients send -1 / 0 / null for "none"
        if not isinstance(value, int) or isinstance(value, bool):
            raise RegistryHttpError(422, 42201, f"'{key}' must be an integer, got {json.dumps(value)[:50]}")
        return value or None

    def root(self, p: dict, body: Any, q: dict) -> Any:
        return {}

    def register(self, p: dict, body: Any, q: dict) -> Any:
        b = self._body(body)
        return {"id": self.r.register(p["subject"], b["schema"], b.get("references"),
                                      schema_id=self._optional_int(b, "id"), version=self._optional_int(b, "version"))}

    def lookup(self, p: dict, body: Any, q: dict) -> Any:
        b = self._body(body)
        return self.r.lookup(p["subject"], b["schema"], _flag(q, "deleted"), b.get("references"))

    def delete_subject(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.delete_subject(p["subject"], _flag(q, "permanent"))

    def schemas(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.schemas(_prefix(q), _flag(q, "deleted"), _flag(q, "latestOnly")))

    def schema_by_id(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.schema_by_id(_schema_id(p))

    def schema_text_by_id(self, p: dict, body: Any, q: dict) -> Any:
        return json.loads(self.r.schema_entry(_schema_id(p))[0])

    def schema_versions(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.schema_versions(_schema_id(p), _flag(q, "deleted")))

    def schema_subjects(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.schema_subjects(_schema_id(p), _flag(q, "deleted")))

    def schema_types(self, p: dict, body: Any, q: dict) -> Any:
        return ["AVRO"]

    def subjects(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.subjects(_prefix(q), _flag(q, "deleted"), _deleted_only(q)))

    def versions(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.versions(p["subject"], _flag(q, "deleted"), _deleted_only(q)))

    def version(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.version(p["subject"], p["version"], _flag(q, "deleted"))

    def delete_version(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.delete_version(p["subject"], p["version"], _flag(q, "permanent"))

    def version_schema(self, p: dict, body: Any, q: dict) -> Any:
        return json.loads(self.r.version(p["subject"], p["version"], _flag(q, "deleted"))["schema"])

    def referenced_by(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.referenced_by(p["subject"], p["version"], _flag(q, "deleted")))

    def compatibility(self, p: dict, body: Any, q: dict) -> Any:
        b = self._body(body)
        return self.r.test_compatibility(p["subject"], b["schema"], p.get("version"), _flag(q, "verbose"),
                                         b.get("references"))

    def get_config(self, p: dict, body: Any, q: dict) -> Any:
        subject = p.get("subject")
        if subject is None or _flag(q, "defaultToGlobal"):
            return {"compatibilityLevel": self.r.level(subject)}
        return {"compatibilityLevel": self.r.subject_level(subject)}

    def put_config(self, p: dict, body: Any, q: dict) -> Any:
        if not isinstance(body, dict) or "compatibility" not in body:
            raise RegistryHttpError(422, 42203, "request body must be {\"compatibility\": LEVEL}")
        return {"compatibility": self.r.set_level(p.get("subject"), body["compatibility"])}

    def delete_config(self, p: dict, body: Any, q: dict) -> Any:
        return {"compatibilityLevel": self.r.delete_level(p.get("subject"))}

    def get_mode(self, p: dict, body: Any, q: dict) -> Any:
        subject = p.get("subject")
        if subject is None or _flag(q, "defaultToGlobal"):
            return {"mode": self.r.mode(subject)}
        return {"mode": self.r.subject_mode(subject)}

    def put_mode(self, p: dict, body: Any, q: dict) -> Any:
        if not isinstance(body, dict) or "mode" not in body:
            raise RegistryHttpError(422, 42204, "request body must be {\"mode\": MODE}")
        return {"mode": self.r.set_mode(p.get("subject"), body["mode"], _flag(q, "force"))}

    def delete_mode(self, p: dict, body: Any, q: dict) -> Any:
        return {"mode": self.r.delete_mode(p.get("subject"))}

    def contexts(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, [DEFAULT_CONTEXT])


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
            413: "Payload Too Large", 422: "Unprocessable Entity", 500: "Internal Server Error"}


class RegistryApp:
    """WSGI application over a :class:`SchemaRegistry` (module docstring)."""

    def __init__(self, registry: SchemaRegistry, metrics: RegistryMetrics | None = None,
                 auth: BasicAuth | None = None) -> None:
        self.api = _Api(registry)
        self.metrics = metrics
        self.auth = auth

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"].upper()
        began = time.perf_counter()
        endpoint, status, value, headers = self._route(method, environ)
        data = json.dumps(value).encode("utf-8")
        start_response(f"{status} {_REASONS.get(status, '')}".rstrip(),
                       [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(data))), *headers])
        if self.metrics is not None:
            self.metrics.request(endpoint, status, time.perf_counter() - began)
        return [b""] if method == "HEAD" else [data]  # HEAD: GET's status and headers, no body

    def _route(self, method: str, environ: dict) -> tuple[str, int, Any, list[tuple[str, str]]]:
        """(endpoint name, HTTP status, JSON value, extra headers) of one request."""
        # the raw request target: PATH_INFO is already percent-decoded, and a subject may hold "/"
        parts = urlsplit(environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/"))
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        routed = "GET" if method == "HEAD" else method
        endpoint = "unknown"
        try:
            principal = None if self.auth is None else self.auth.authenticate(environ)
            body = self._body(environ)
            allowed = []
            for m, pattern, name in ROUTES:
                match = pattern.match(path)
                if not match:
                    continue
                if m != routed:
                    allowed.append(m)
                    continue
                params = {k: unquote(v) for k, v in match.groupdict().items()}
                endpoint = name
                if principal is not None:
                    self.auth.authorize(principal, name, method, path, environ)  # type: ignore[union-attr]
                return endpoint, 200, getattr(self.api, name)(params, body, query), []
            if allowed:
                raise RegistryHttpError(405, 405, f"HTTP 405 Method Not Allowed: {method} {path}; "
                                                  f"allowed: {', '.join(sorted(set(allowed)))}")
            raise RegistryHttpError(404, 404, f"HTTP 404 Not Found: no endpoint {method} {path}")
        except RegistryHttpError as exc:
            return endpoint, exc.status, {"error_code": exc.error_code, "message": exc.message}, \
                list(getattr(exc, "headers", []))
        except Exception as exc:  # the store failed: report, keep serving
            log.exception("registry request %s %s failed", method, path[:300])
            return endpoint, 500, {"error_code": 50001, "message": f"Error in the backend data store: {exc}"}, []

    @staticmethod
    def _body(environ: dict) -> Any:
        """The JSON body (None if there is none); the server has already read all of it."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise RegistryHttpError(400, 400, f"Content-Length {environ.get('CONTENT_LENGTH')!r} is not a number") from None
        if length > MAX_BODY:
            raise RegistryHttpError(413, 41301, f"request body of {length} bytes exceeds {MAX_BODY}")
        if not length:
            return None
        raw = environ["wsgi.input"].read(length)
        try:
            return json.loads(raw)
        except RecursionError:
            raise RegistryHttpError(400, 400, "request body is not JSON this registry reads: it nests deeper "
                                              "than Python's stack") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RegistryHttpError(400, 400, f"request body is not JSON: {exc}") from exc
