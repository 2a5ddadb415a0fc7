"""HTTP front of the schema registry: the REST subset Confluent's clients call, JSON in and out.

Routes (bodies, query parameters and errors as Confluent's Schema Registry, so its clients work)::

    POST   /subjects/{s}/versions                 {"schema": "<schema JSON string>"} -> {"id": N}
    POST   /subjects/{s}[?deleted=true]           {"schema": ...} -> {"subject", "version", "id", "schema"}
    GET    /subjects[?subjectPrefix=P&deleted=true&deletedOnly=true&offset=&limit=] -> ["s", ...]
    GET    /subjects/{s}/versions[?deleted=true&deletedOnly=true]      -> [1, 2, ...]
    GET    /subjects/{s}/versions/{v|latest}[?deleted=true]  -> {"subject", "version", "id", "schema"}
    GET    /subjects/{s}/versions/{v|latest}/schema          -> the schema itself
    DELETE /subjects/{s}/versions/{v|latest}[?permanent=true]    -> v
    DELETE /subjects/{s}[?permanent=true]                        -> [versions deleted]
    GET    /schemas/ids/{id}                      -> {"schema": "<schema JSON string>"}
    GET    /schemas/ids/{id}/versions[?deleted=true]  -> [{"subject", "version"}, ...]
    GET    /schemas/ids/{id}/subjects[?deleted=true]  -> ["s", ...]
    GET    /schemas/types                         -> ["AVRO"]
    POST   /compatibility/subjects/{s}/versions/{v|latest}[?verbose=true] -> {"is_compatible": bool[, "messages"]}
    POST   /compatibility/subjects/{s}/versions[?verbose=true]            -> the same, against the level's versions
    GET    /config  |  /config/{s}[?defaultToGlobal=true]  -> {"compatibilityLevel": "BACKWARD"}
    PUT    /config  |  /config/{s}                {"compatibility": "FULL"} -> {"compatibility": "FULL"}
    DELETE /config/{s}                            -> {"compatibilityLevel": <the level it had>}

Errors: HTTP status with body ``{"error_code": N, "message": "..."}`` (codes in
:mod:`ingest.events.registry`); an unknown path is ``404``/``{"error_code": 404}``,
a known path with another method ``405``/``{"error_code": 405}``, a body that is
not JSON ``400``/``{"error_code": 400}`` (as Confluent's REST layer answers).
Boolean query parameters are true when they read ``true`` in any case (Java's
``Boolean.parseBoolean``, what Confluent's JAX-RS resources use).
``ThreadingHTTPServer``: one thread per connection; the registry object is thread-safe.

Metrics (``metrics.port``, :mod:`ingest.metrics.registry`): each routed request
is counted and timed under its route name, on an endpoint of its own thread.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from ingest.errors import RegistryHttpError
from ingest.events.registry import SchemaRegistry
from ingest.metrics.exporter import metrics_enabled, new_registry, start_exporter
from ingest.metrics.registry import RegistryMetrics

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY = 16 * 1024 * 1024
# The listen backlog: connections the kernel completes while the accept loop is busy.
# socketserver's default of 5 reset registrations under 20 concurrent clients; the kernel
# caps this at net.core.somaxconn (4096 on current Linux).
LISTEN_BACKLOG = 1024


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

_S = r"(?P<subject>[^/]+)"
_V = r"(?P<version>[^/]+)"
_ID = r"(?P<id>[^/]+)"
ROUTES: list[tuple[str, re.Pattern, str]] = [(m, re.compile(f"^{p}/?$"), name) for m, p, name in [
    ("GET", "", "root"),
    ("POST", f"/subjects/{_S}/versions", "register"),
    ("POST", f"/subjects/{_S}", "lookup"),
    ("DELETE", f"/subjects/{_S}", "delete_subject"),
    ("GET", f"/schemas/ids/{_ID}", "schema_by_id"),
    ("GET", f"/schemas/ids/{_ID}/versions", "schema_versions"),
    ("GET", f"/schemas/ids/{_ID}/subjects", "schema_subjects"),
    ("GET", "/schemas/types", "schema_types"),
    ("GET", "/subjects", "subjects"),
    ("GET", f"/subjects/{_S}/versions", "versions"),
    ("GET", f"/subjects/{_S}/versions/{_V}", "version"),
    ("DELETE", f"/subjects/{_S}/versions/{_V}", "delete_version"),
    ("GET", f"/subjects/{_S}/versions/{_V}/schema", "version_schema"),
    ("POST", f"/compatibility/subjects/{_S}/versions/{_V}", "compatibility"),
    ("POST", f"/compatibility/subjects/{_S}/versions", "compatibility"),
    ("GET", "/config", "get_config"),
    ("PUT", "/config", "put_config"),
    ("GET", f"/config/{_S}", "get_config"),
    ("PUT", f"/config/{_S}", "put_config"),
    ("DELETE", f"/config/{_S}", "delete_config"),
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


class _Api:
    """Route handlers: (path params, JSON body, query params) -> JSON-able result."""

    def __init__(self, registry: SchemaRegistry, metrics: RegistryMetrics | None = None) -> None:
        self.r = registry
        self.metrics = metrics

    @staticmethod
    def _schema_field(body: Any) -> Any:
        if not isinstance(body, dict) or "schema" not in body:
            raise RegistryHttpError(422, 42201, "request body must be a JSON object with a 'schema' string")
        if str(body.get("schemaType") or "AVRO").upper() != "AVRO":
            raise RegistryHttpError(422, 42201, f"schemaType {body['schemaType']!r} is not supported; only AVRO")
        return body["schema"]

    def root(self, p: dict, body: Any, q: dict) -> Any:
        return {}

    def register(self, p: dict, body: Any, q: dict) -> Any:
        return {"id": self.r.register(p["subject"], self._schema_field(body))}

    def lookup(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.lookup(p["subject"], self._schema_field(body), _flag(q, "deleted"))

    def delete_subject(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.delete_subject(p["subject"], _flag(q, "permanent"))

    def schema_by_id(self, p: dict, body: Any, q: dict) -> Any:
        return {"schema": self.r.schema_by_id(_schema_id(p))}

    def schema_versions(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.schema_versions(_schema_id(p), _flag(q, "deleted")))

    def schema_subjects(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.schema_subjects(_schema_id(p), _flag(q, "deleted")))

    def schema_types(self, p: dict, body: Any, q: dict) -> Any:
        return ["AVRO"]

    def subjects(self, p: dict, body: Any, q: dict) -> Any:
        prefix = q.get("subjectPrefix", "")
        prefix = "" if prefix == ":*:" else prefix  # Confluent's default: every context
        return _page(q, self.r.subjects(prefix, _flag(q, "deleted"), _deleted_only(q)))

    def versions(self, p: dict, body: Any, q: dict) -> Any:
        return _page(q, self.r.versions(p["subject"], _flag(q, "deleted"), _deleted_only(q)))

    def version(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.version(p["subject"], p["version"], _flag(q, "deleted"))

    def delete_version(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.delete_version(p["subject"], p["version"], _flag(q, "permanent"))

    def version_schema(self, p: dict, body: Any, q: dict) -> Any:
        return json.loads(self.r.version(p["subject"], p["version"], _flag(q, "deleted"))["schema"])

    def compatibility(self, p: dict, body: Any, q: dict) -> Any:
        return self.r.test_compatibility(p["subject"], self._schema_field(body), p.get("version"),
                                         _flag(q, "verbose"))

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
        return {"compatibilityLevel": self.r.delete_level(p["subject"])}


def _make_handler(api: _Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ingest-schema-registry"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, value: Any) -> None:
            self.status = status
            data = json.dumps(value).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":  # HEAD: GET's status and headers, no body
                self.wfile.write(data)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """Requests refused before routing (bad request line, unknown method...): a JSON body too."""
            self.close_connection = True
            text = f"HTTP {code} {self.responses.get(code, ('',))[0]}" + (f": {message}" if message else "")
            self._send(code, {"error_code": code, "message": text})

        def _dispatch(self, method: str) -> None:
            if api.metrics is None:
                self._route(method)
                return
            began = time.perf_counter()
            self.endpoint, self.status = "unknown", 500
            try:
                self._route(method)
            finally:
                api.metrics.request(self.endpoint, self.status, time.perf_counter() - began)

        def _route(self, method: str) -> None:
            parts = urlsplit(self.path)
            path = parts.path
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            try:
                body = None
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise RegistryHttpError(413, 41301, f"request body of {length} bytes exceeds {MAX_BODY}")
                if length:
                    raw = self.rfile.read(length)
                    try:
                        body = json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                        raise RegistryHttpError(400, 400, f"request body is not JSON: {exc}") from exc
                allowed = []
                for m, pattern, name in ROUTES:
                    match = pattern.match(path)
                    if not match:
                        continue
                    if m != method:
                        allowed.append(m)
                        continue
                    params = {k: unquote(v) for k, v in match.groupdict().items()}
                    self.endpoint = name
                    self._send(200, getattr(api, name)(params, body, query))
                    return
                if allowed:
                    raise RegistryHttpError(405, 405, f"HTTP 405 Method Not Allowed: {method} {path}; "
                                                      f"allowed: {', '.join(sorted(set(allowed)))}")
                raise RegistryHttpError(404, 404, f"HTTP 404 Not Found: no endpoint {method} {path}")
            except RegistryHttpError as exc:
                self._send(exc.status, {"error_code": exc.error_code, "message": exc.message})
            except Exception as exc:  # the store failed: report, keep serving
                log.exception("registry request %s %s failed", method, path)
                self._send(500, {"error_code": 50001, "message": f"Error in the backend data store: {exc}"})

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_HEAD(self) -> None:
            self._dispatch("GET")

        def __getattr__(self, name: str) -> Any:
            # any other method (PATCH, OPTIONS, TRACE, made-up ones) is routed like the rest and
            # answered with a JSON 405 (known path) or 404, where http.server would send HTML 501
            if name.startswith("do_"):
                return lambda: self._dispatch(name[3:])
            raise AttributeError(name)

    return Handler


class RegistryServer:
    """The registry HTTP service on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, registry: SchemaRegistry, host: str = "127.0.0.1", port: int = 0,
                 config: Mapping[str, Any] | None = None) -> None:
        """``config``: the ``metrics.*`` keys (``ingest.events.registry_config``); None = metrics off.

        Raises:
            ConfigError: the metrics endpoint cannot be bound.
        """
        self.registry = registry
        self.exporter = None
        metrics = None
        if config is not None and metrics_enabled(config):
            prom = new_registry()
            metrics = RegistryMetrics(prom, registry)
        self._httpd = _HTTPServer((host, port), _make_handler(_Api(registry, metrics)))
        self._thread: threading.Thread | None = None
        if metrics is not None:
            try:
                self.exporter = start_exporter(prom, config, "schema registry")
            except BaseException:
                self._httpd.server_close()
                raise

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def start(self) -> "RegistryServer":
        """Serve from a background thread (in-process use)."""
        self._thread = threading.Thread(target=self.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self.close()

    def close(self) -> None:
        """Close the listening socket, the metrics endpoint and the store (after ``serve_forever`` returned)."""
        self._httpd.server_close()
        if self.exporter is not None:
            self.exporter.stop()
        self.registry.store.close()
