"""The schema registry's logic: register with compatibility checks, look-ups, soft and permanent deletes.

Transport-free (the HTTP layer is :mod:`ingest.events.registry_server`). Errors
are :class:`RegistryHttpError` carrying the HTTP status and the error code of
Confluent's Schema Registry (its ``Errors.java``), which its clients expect:

==========  =====  ======================================================
error_code  HTTP   meaning
==========  =====  ======================================================
40401       404    subject not found
40402       404    version not found
40403       404    schema not found
40404       404    subject was soft-deleted (``permanent=true`` to delete it for good)
40405       404    subject not soft-deleted before a permanent delete
40406       404    version was soft-deleted (``permanent=true`` to delete it for good)
40407       404    version not soft-deleted before a permanent delete
40408       404    subject has no subject-level compatibility configured
40901       409    schema incompatible with the subject's level
42201       422    schema does not parse (invalid Avro schema)
42202       422    invalid version (not in [1, 2^31-1], nor ``latest`` / ``-1``)
42203       422    invalid compatibility level
50001       500    store error
==========  =====  ======================================================

Soft deletes follow Confluent: a soft-deleted version keeps its number and id,
is hidden from look-ups unless ``deleted=true`` is asked for, is no longer
checked for compatibility, and a permanent delete needs a soft delete first.
Schema texts are never removed, so data written with any id stays decodable.

Concurrency contract: thread-safe; writes run under the store's write lock, so
check-then-append is atomic even across registry processes sharing a store.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from ingest.errors import RegistryHttpError, SchemaError
from ingest.events import compatibility
from ingest.events.registry_store import RegistryStore, VersionEntry
from ingest.events.schemas import canonical, parse_schema_text

log = logging.getLogger(__name__)

MAX_VERSION = 2 ** 31 - 1
LATEST = -1  # the version id Confluent's VersionId gives "latest"


def parse_version(version: str) -> int:
    """``latest`` or ``-1`` -> :data:`LATEST`; otherwise an int in [1, 2^31-1] (42202 if not)."""
    if version in ("latest", "-1"):
        return LATEST
    try:
        v = int(version)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_VERSION:
        raise RegistryHttpError(
            422, 42202, f"The specified version '{version}' is not a valid version id. "
            "Allowed values are between [1, 2^31-1] and the string \"latest\"")
    return v


def _subject_not_found(subject: str) -> RegistryHttpError:
    return RegistryHttpError(404, 40401, f"Subject '{subject}' not found.")


def _version_not_found(subject: str, version: int) -> RegistryHttpError:
    shown = "latest" if version == LATEST else version
    return RegistryHttpError(404, 40402, f"Version {shown} not found for subject '{subject}'.")


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

    def _schemas(self, ids: list[int]) -> list[Any]:
        return [json.loads(self.schema_by_id(i)) for i in ids]

    def register(self, subject: str, schema_text: Any) -> int:
        """Register under ``subject``; the same schema again returns its existing id.

        A schema whose only version in the subject is soft-deleted gets a new version with
        the same id, and the soft-deleted versions holding that id go for good (Confluent).

        Raises:
            RegistryHttpError: 422 unparseable, 409 incompatible (message names field and rule).
        """
        value, canon = self._parse(schema_text)
        with self.store.write_lock():
            entries = self.store.version_entries(subject)
            live = {v: e.id for v, e in entries.items() if not e.deleted}
            existing_id = self.store.find_id(canon)
            if existing_id is not None and existing_id in live.values():
                return existing_id
            level = self.level(subject)
            problems = compatibility.check(value, self._schemas([live[v] for v in sorted(live)]), level)
            if problems:
                raise RegistryHttpError(
                    409, 40901,
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f"\"{subject}\" ({len(problems)} problem(s)): " + "; ".join(problems))
            schema_id = existing_id if existing_id is not None else self.store.add_schema(canon)
            version = self.store.add_version(subject, schema_id)
            for v, e in entries.items():
                if e.deleted and e.id == schema_id:
                    self.store.remove_version(subject, v)
        log.info("registered subject %s version %d as schema id %d", subject, version, schema_id)
        return schema_id

    def lookup(self, subject: str, schema_text: Any, deleted: bool = False) -> dict:
        """The version of ``subject`` holding this schema (POST /subjects/{s})."""
        _, canon = self._parse(schema_text)
        entries = self._entries(subject, deleted)
        schema_id = self.store.find_id(canon)
        for v, e in sorted(entries.items(), reverse=True):
            if e.id == schema_id:
                return {"subject": subject, "version": v, "id": e.id, "schema": canon}
        raise RegistryHttpError(404, 40403, f"Schema not found under subject '{subject}'")

    def schema_versions(self, schema_id: int, deleted: bool = False) -> list[dict]:
        """Every (subject, version) holding ``schema_id`` (GET /schemas/ids/{id}/versions)."""
        self.schema_by_id(schema_id)
        out = []
        for subject in self.store.subjects():
            for v, e in sorted(self.store.version_entries(subject).items()):
                if e.id == schema_id and (deleted or not e.deleted):
                    out.append({"subject": subject, "version": v})
        return out

    def schema_subjects(self, schema_id: int, deleted: bool = False) -> list[str]:
        """Subjects holding ``schema_id`` (GET /schemas/ids/{id}/subjects)."""
        return list(dict.fromkeys(sv["subject"] for sv in self.schema_versions(schema_id, deleted)))

    # --- subjects ---------------------------------------------------------------------

    def subjects(self, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        """Subjects with a live version (``deleted``: any version; ``deleted_only``: a deleted one)."""
        out = []
        for subject in self.store.subjects():
            if not subject.startswith(prefix):
                continue
            states = {e.deleted for e in self.store.version_entries(subject).values()}
            if (True in states) if deleted_only else (bool(states) if deleted else False in states):
                out.append(subject)
        return out

    def _entries(self, subject: str, deleted: bool) -> dict[int, VersionEntry]:
        """The subject's versions (soft-deleted ones only if ``deleted``); 40401 if none."""
        entries = self.store.version_entries(subject)
        if not deleted:
            entries = {v: e for v, e in entries.items() if not e.deleted}
        if not entries:
            raise _subject_not_found(subject)
        return entries

    def versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        entries = self._entries(subject, deleted or deleted_only)
        return sorted(v for v, e in entries.items() if e.deleted or not deleted_only)

    def _resolve(self, subject: str, version: str, deleted: bool) -> tuple[int, VersionEntry]:
        """(version number, entry) of ``version``; ``latest`` is the latest live version."""
        v = parse_version(version)
        entries = self.store.version_entries(subject)
        if v == LATEST:
            live = [n for n, e in entries.items() if not e.deleted]
            v = max(live, default=LATEST)
        entry = entries.get(v)
        if entry is None or (entry.deleted and not deleted):
            if not any(deleted or not e.deleted for e in entries.values()):
                raise _subject_not_found(subject)
            raise _version_not_found(subject, v)
        return v, entry

    def version(self, subject: str, version: str, deleted: bool = False) -> dict:
        v, entry = self._resolve(subject, version, deleted)
        return {"subject": subject, "version": v, "id": entry.id, "schema": self.schema_by_id(entry.id)}

    # --- deletes ----------------------------------------------------------------------------

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        """Soft-delete a version, or remove a soft-deleted one for good (``permanent``)."""
        with self.store.write_lock():
            v, entry = self._resolve(subject, version, deleted=True)
            if entry.deleted and not permanent:
                raise RegistryHttpError(
                    404, 40406, f"Subject '{subject}' Version {v} was soft deleted. "
                    "Set permanent=true to delete permanently")
            if permanent and not entry.deleted:
                raise RegistryHttpError(
                    404, 40407, f"Subject '{subject}' Version {v} was not deleted first before being "
                    "permanently deleted")
            if permanent:
                self.store.remove_version(subject, v)
                if not self.store.version_entries(subject):
                    self.store.delete_config(subject)
            else:
                self.store.mark_deleted(subject, v, entry.id)
        log.info("%s deleted subject %s version %d (schema id %d)",
                 "permanently" if permanent else "soft", subject, v, entry.id)
        return v

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft-delete every live version, or remove a soft-deleted subject for good."""
        with self.store.write_lock():
            entries = self.store.version_entries(subject)
            if not entries:
                raise _subject_not_found(subject)
            live = sorted(v for v, e in entries.items() if not e.deleted)
            if permanent and live:
                raise RegistryHttpError(
                    404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")
            if not permanent and not live:
                raise RegistryHttpError(
                    404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently")
            if permanent:
                gone = sorted(entries)
                for v in reversed(gone):
                    self.store.remove_version(subject, v)
                self.store.delete_config(subject)
            else:
                gone = live
                for v in live:
                    self.store.mark_deleted(subject, v, entries[v].id)
        log.info("%s deleted subject %s versions %s", "permanently" if permanent else "soft", subject, gone)
        return gone

    # --- compatibility ---------------------------------------------------------------------

    def test_compatibility(self, subject: str, schema_text: Any, version: str | None,
                           verbose: bool = False) -> dict:
        """POST /compatibility/subjects/{s}/versions[/{v}]: ``{"is_compatible": bool}``.

        Against one version (``latest``: the latest live one; none yet: compatible) or,
        with ``version`` None, against the live versions the subject's level names.
        ``verbose`` adds ``messages`` and reports an unparseable schema there instead of 422.
        """
        if version is None:
            live = self.store.versions(subject)
            previous_ids = [live[v] for v in sorted(live)]
        else:
            v = parse_version(version)
            entries = self.store.version_entries(subject)
            if v != LATEST and not entries:
                raise _subject_not_found(subject)
            live = {n: e.id for n, e in entries.items() if not e.deleted}
            if v == LATEST:
                previous_ids = [live[max(live)]] if live else []
            elif v in live:
                previous_ids = [live[v]]
            else:
                raise _version_not_found(subject, v)
        level = self.level(subject)
        try:
            value, _ = self._parse(schema_text)
        except RegistryHttpError as exc:
            if not verbose:
                raise
            return {"is_compatible": False, "messages": [exc.message]}
        problems = compatibility.check(value, self._schemas(previous_ids), level)
        if problems:
            problems.append(f"{{compatibility: '{level}'}}")
        result: dict = {"is_compatible": not problems}
        if verbose:
            result["messages"] = problems
        return result

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

    def delete_level(self, subject: str) -> str:
        """DELETE /config/{s}: drop the subject's own level (40401 if it has none, as Confluent)."""
        with self.store.write_lock():
            own = self.store.get_config(subject)
            if own is None:
                raise _subject_not_found(subject)
            self.store.delete_config(subject)
        return own
