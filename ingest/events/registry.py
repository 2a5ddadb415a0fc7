"""The schema registry's logic: register with compatibility checks, look up by id/subject/version.

Transport-free (the HTTP layer is :mod:`ingest.events.registry_server`). Errors
are :class:`RegistryHttpError` carrying the HTTP status and the Confluent
``error_code`` that clients of such registries expect:

==========  =====  ======================================================
error_code  HTTP   meaning
==========  =====  ======================================================
40401       404    subject not found
40402       404    version not found
40403       404    schema not found
409         409    schema incompatible with the subject's level
42201       422    schema does not parse (invalid Avro schema)
42202       422    invalid version (not a positive int or ``latest``)
42203       422    invalid compatibility level
50001       500    store error
==========  =====  ======================================================

Concurrency contract: thread-safe; registration runs under the store's write
lock, so check-then-append is atomic even across registry processes sharing a store.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from ingest.errors import RegistryHttpError, SchemaError
from ingest.events import compatibility
from ingest.events.registry_store import RegistryStore
from ingest.events.schemas import canonical, parse_schema_text

log = logging.getLogger(__name__)


class SchemaRegistry:
    """Registry operations over a :class:`RegistryStore`."""

    def __init__(self, store: RegistryStore, default_level: str = compatibility.DEFAULT_LEVEL) -> None:
        self.store = store
        self.default_level = default_level

    # --- schemas -----------------------------------------------------------------

    def _parse(self, schema_text: Any) -> tuple[Any, str]:
        if not isinstance(schema_text, str):
            raise RegistryHttpError(422, 42201, f"'schema' must be a JSON string holding the schema, got {type(schema_text).__name__}")
        try:
            value = parse_schema_text(schema_text)
        except SchemaError as exc:
            raise RegistryHttpError(422, 42201, f"Invalid schema: {exc}") from exc
        return value, canonical(value)

    def schema_by_id(self, schema_id: int) -> str:
        text = self.store.get_schema(schema_id)
        if text is None:
            raise RegistryHttpError(404, 40403, f"Schema {schema_id} not found")
        return text

    def register(self, subject: str, schema_text: Any) -> int:
        """Register under ``subject``; the same schema again returns its existing id.

        Raises:
            RegistryHttpError: 422 unparseable, 409 incompatible (message names field and rule).
        """
        value, canon = self._parse(schema_text)
        with self.store.write_lock():
            versions = self.store.versions(subject)
            existing_id = self.store.find_id(canon)
            if existing_id is not None and existing_id in versions.values():
                return existing_id
            previous = [json.loads(self.schema_by_id(versions[v])) for v in sorted(versions)]
            level = self.level(subject)
            problems = compatibility.check(value, previous, level)
            if problems:
                raise RegistryHttpError(
                    409, 409,
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f"'{subject}' ({len(problems)} problem(s)): " + "; ".join(problems))
            schema_id = existing_id if existing_id is not None else self.store.add_schema(canon)
            version = self.store.add_version(subject, schema_id)
        log.info("registered subject %s version %d as schema id %d", subject, version, schema_id)
        return schema_id

    def lookup(self, subject: str, schema_text: Any) -> dict:
        """The version of ``subject`` holding this schema (POST /subjects/{s})."""
        _, canon = self._parse(schema_text)
        versions = self._versions(subject)
        schema_id = self.store.find_id(canon)
        for v, i in sorted(versions.items()):
            if i == schema_id:
                return {"subject": subject, "version": v, "id": i, "schema": canon}
        raise RegistryHttpError(404, 40403, f"Schema not found under subject '{subject}'")

    # --- subjects ---------------------------------------------------------------------

    def subjects(self) -> list[str]:
        return self.store.subjects()

    def _versions(self, subject: str) -> dict[int, int]:
        versions = self.store.versions(subject)
        if not versions:
            raise RegistryHttpError(404, 40401, f"Subject '{subject}' not found.")
        return versions

    def versions(self, subject: str) -> list[int]:
        return sorted(self._versions(subject))

    def version(self, subject: str, version: str) -> dict:
        versions = self._versions(subject)
        if version in ("latest", "-1"):
            v = max(versions)
        else:
            try:
                v = int(version)
            except ValueError:
                v = 0
            if v <= 0:
                raise RegistryHttpError(
                    422, 42202, f"The specified version '{version}' is not a valid version id. "
                    "Allowed values are between [1, 2^31-1] and the string \"latest\"")
            if v not in versions:
                raise RegistryHttpError(404, 40402, f"Version {v} not found for subject '{subject}'.")
        schema_id = versions[v]
        return {"subject": subject, "version": v, "id": schema_id, "schema": self.schema_by_id(schema_id)}

    # --- config ----------------------------------------------------------------------------

    def level(self, subject: str | None = None) -> str:
        if subject is not None:
            own = self.store.get_config(subject)
            if own:
                return own
        return self.store.get_config(None) or self.default_level

    def subject_level(self, subject: str) -> str:
        own = self.store.get_config(subject)
        if own is None:
            raise RegistryHttpError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return own

    def set_level(self, subject: str | None, level: Any) -> str:
        if not isinstance(level, str) or level.upper() not in compatibility.LEVELS:
            raise RegistryHttpError(
                422, 42203, f"Invalid compatibility level {level!r}; allowed: {', '.join(compatibility.LEVELS)}")
        level = level.upper()
        self.store.set_config(subject, level)
        return level
