"""HTTP front of the schema registry: the widely used REST subset, JSON in and out.

Routes (bodies and errors as Confluent's Schema Registry, so its clients work)::

    POST /subjects/{subject}/versions      {"schema": "<schema JSON string>"} -> {"id": N}
    POST /subjects/{subject}               {"schema": ...} -> {"subject", "version", "id", "schema"}
    GET  /schemas/ids/{id}                 -> {"schema": "<schema JSON string>"}
    GET  /subjects                         -> ["subject", ...]
    GET  /subjects/{subject}/versions      -> [1, 2, ...]
    GET  /subjects/{subject}/versions/{v|latest} -> {"subject", "version", "id", "schema"}
    GET  /config  |  /config/{subject}     -> {"compatibilityLevel": "BACKWARD"}
    PUT  /config  |  /config/{subject}     {"compatibility": "FULL"} -> {"compatibility": "FULL"}

Errors: HTTP status with body ``{"error_code": N, "message": "..."}`` (codes in
:mod:`ingest.events.registry`). ``ThreadingHTTPServer``: one thread per
connection; the registry object is thread-safe.
"""
from __future__ import annotations

import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from ingest.errors import RegistryHttpError
from ingest.events.registry import SchemaRegistry

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
ROUTES: list[tuple[str, re.Pattern, str]] = [
    ("POST", re.compile(rf"^/subjects/{_S}/versions/?$"), "register"),
    ("POST", re.compile(rf"^/subjects/{_S}/?$"), "lookup"),
    ("GET", re.compile(r"^/schemas/ids/(?P<id>[^/]+)/?$"), "schema_by_id"),
    ("GET", re.compile(r"^/subjects/?$"), "subjects"),
    ("GET", re.compile(rf"^/subjects/{_S}/versions/?$"), "versions"),
    ("GET", re.compile(rf"^/subjects/{_S}/versions/(?P<version>[^/]+)/?$"), "version"),
    ("GET", re.compile(rf"^/subjects/{_S}/versions/(?P<version>[^/]+)/schema/?$"), "version_schema"),
    ("GET", re.compile(r"^/config/?$"), "get_config"),
    ("PUT", re.compile(r"^/config/?$"), "put_config"),
    ("GET", re.compile(rf"^/config/{_S}/?$"), "get_config"),
    ("PUT", re.compile(rf"^/config/{_S}/?$"), "put_config"),
]


class _Api:
    """Route handlers: (params, body) -> JSON-able result."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.r = registry

    @staticmethod
    def _schema_field(body: Any) -> Any:
        if not isinstance(body, dict) or "schema" not in body:
            raise RegistryHttpError(422, 42201, "request body must be a JSON object with a 'schema' string")
        if body.get("schemaType", "AVRO") != "AVRO":
            raise RegistryHttpError(422, 42201, f"schemaType {body['schemaType']!r} is not supported; only AVRO")
        return body["schema"]

    def register(self, p: dict, body: Any) -> Any:
        return {"id": self.r.register(p["subject"], self._schema_field(body))}

    def lookup(self, p: dict, body: Any) -> Any:
        return self.r.lookup(p["subject"], self._schema_field(body))

    def schema_by_id(self, p: dict, body: Any) -> Any:
        try:
            schema_id = int(p["id"])
        except ValueError:
            raise RegistryHttpError(404, 40403, f"Schema {p['id']} not found") from None
        return {"schema": self.r.schema_by_id(schema_id)}

    def subjects(self, p: dict, body: Any) -> Any:
        return self.r.subjects()

    def versions(self, p: dict, body: Any) -> Any:
        return self.r.versions(p["subject"])

    def version(self, p: dict, body: Any) -> Any:
        return self.r.version(p["subject"], p["version"])

    def version_schema(self, p: dict, body: Any) -> Any:
        return json.loads(self.r.version(p["subject"], p["version"])["schema"])

    def get_config(self, p: dict, body: Any) -> Any:
        return {"compatibilityLevel": self.r.level(p.get("subject"))}

    def put_config(self, p: dict, body: Any) -> Any:
        if not isinstance(body, dict) or "compatibility" not in body:
            raise RegistryHttpError(422, 42203, "request body must be {\"compatibility\": LEVEL}")
        return {"compatibility": self.r.set_level(p.get("subject"), body["compatibility"])}


def _make_handler(api: _Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ingest-schema-registry"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self, method: str) -> None:
            path = urlsplit(self.path).path
            try:
                body = None
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise RegistryHttpError(413, 41301, f"request body of {length} bytes exceeds {MAX_BODY}")
                if length:
                    raw = self.rfile.read(length)
                    try:
                        body = json.loads(raw)
                    except json.JSONDecodeError as exc:
                        raise RegistryHttpError(422, 42201, f"request body is not JSON: {exc}") from exc
                allowed = []
                for m, pattern, name in ROUTES:
                    match = pattern.match(path)
                    if not match:
                        continue
                    if m != method:
                        allowed.append(m)
                        continue
                    params = {k: unquote(v) for k, v in match.groupdict().items()}
                    self._send(200, getattr(api, name)(params, body))
                    return
                if allowed:
                    raise RegistryHttpError(405, 405, f"method {method} not allowed on {path}; use {', '.join(sorted(set(allowed)))}")
                raise RegistryHttpError(404, 404, f"no such endpoint: {method} {path}")
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

    return Handler


class RegistryServer:
    """The registry HTTP service on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, registry: SchemaRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        self._httpd = _HTTPServer((host, port), _make_handler(_Api(registry)))
        self._thread: threading.Thread | None = None

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
        self._httpd.server_close()
        self.registry.store.close()
