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
40409       404    subject has no subject-level mode configured
40901       409    schema incompatible with the subject's level
42201       422    invalid schema: does not parse, nests deeper than
                   :data:`MAX_SCHEMA_DEPTH`, or a reference that does not resolve
42202       422    invalid version (not in [1, 2^31-1], nor ``latest`` / ``-1``)
42203       422    invalid compatibility level
42204       422    invalid mode
42205       422    operation not permitted by the mode (READONLY, IMPORT rules)
42206       422    a version other schemas reference cannot be deleted
42208       422    invalid subject (ISO control characters)
50001       500    store error
==========  =====  ======================================================

Modes (Confluent's ``ModeResource``): READWRITE (default) registers new schemas;
READONLY refuses registrations, deletes and config changes; IMPORT registers only
schemas that bring their id (and optionally version), without compatibility checks,
so a registry can be copied id for id. A subject's own mode overrides the global one.

References (:mod:`ingest.events.registry_references`): a schema may use named types
that other subjects' versions define; they are resolved when the schema is
registered, looked up or checked, and a referenced version cannot be deleted while
a schema refers to it.

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
import unicodedata
from dataclasses import dataclass
from typing import Any

from ingest.errors import RegistryHttpError, SchemaError
from ingest.events import compatibility
from ingest.events.registry_references import (MAX_SCHEMA_DEPTH, Reference, inline, json_depth,
                                               named_definitions, parse_references, split_stored, stored_text)
from ingest.events.registry_store import RegistryStore, VersionEntry
from ingest.events.schemas import canonical, parse_schema_text

log = logging.getLogger(__name__)

MAX_VERSION = 2 ** 31 - 1
LATEST = -1  # the version id Confluent's VersionId gives "latest"

READWRITE, READONLY, IMPORT = "READWRITE", "READONLY", "IMPORT"
MODES = (READWRITE, READONLY, IMPORT)
DEFAULT_MODE = READWRITE
# READONLY_OVERRIDE is Confluent's deprecated spelling of READONLY; FORWARD is its
# leader-forwarding mode, which a registry without leader election has no use for.
_MODE_ALIASES = {"READONLY_OVERRIDE": READONLY}


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


def check_subject(subject: str) -> None:
    """Confluent's rule for a subject name: no ISO control characters (42208 if it has one)."""
    bad = next((c for c in subject if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise RegistryHttpError(
            422, 42208, f"The specified subject '{subject[:200]}' is not a valid subject: it contains the "
            f"control character U+{ord(bad):04X}; a subject may hold any other character")


def _subject_not_found(subject: str) -> RegistryHttpError:
    return RegistryHttpError(404, 40401, f"Subject '{subject}' not found.")


def _version_not_found(subject: str, version: int) -> RegistryHttpError:
    shown = "latest" if version == LATEST else version
    return RegistryHttpError(404, 40402, f"Version {shown} not found for subject '{subject}'.")


def _invalid_schema(detail: str) -> RegistryHttpError:
    return RegistryHttpError(422, 42201, f"Invalid schema: {detail}")


def _too_deep(what: str) -> RegistryHttpError:
    return _invalid_schema(f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels of JSON (records inside "
                           "records, arrays of arrays...), more than this registry checks; flatten it")


@dataclass(frozen=True)
class ParsedSchema:
    """A schema from a request: as stored (canonical text and references) and self-contained."""

    canonical: str
    references: tuple[Reference, ...]
    resolved: Any  # the schema with its references' definitions inlined (what fastavro and the checker read)

    @property
    def stored(self) -> str:
        return stored_text(self.canonical, self.references)


class SchemaRegistry:
    """Registry operations over a :class:`RegistryStore`."""

    def __init__(self, store: RegistryStore, default_level: str = compatibility.DEFAULT_LEVEL) -> None:
        self.store = store
        self.default_level = default_level
        self._resolved: dict[int, Any] = {}  # id -> self-contained schema (ids and their references are immutable)

    # --- schemas -----------------------------------------------------------------

    def parse(self, schema_text: Any, references: Any = None, *, lookup_deleted: bool = False) -> ParsedSchema:
        """Validate a schema from a request and resolve its references.

        Raises:
            RegistryHttpError: 42201 naming what is wrong (not Avro, nested too deep,
                a reference that is malformed or names no existing version).
        """
        if not isinstance(schema_text, str):
            raise _invalid_schema(f"'schema' must be a JSON string holding the schema, got {type(schema_text).__name__}")
        refs = parse_references(references)
        try:
            value = json.loads(schema_text)
        except RecursionError:
            raise _too_deep("the schema") from None
        except json.JSONDecodeError as exc:
            raise _invalid_schema(f"schema is not JSON: {exc}") from exc
        if json_depth(value) > MAX_SCHEMA_DEPTH:
            raise _too_deep("the schema")
        fixed: list[Reference] = []
        definitions: dict[str, Any] = {}
        for ref in refs:
            v, entry = self._reference_target(ref, lookup_deleted)
            fixed.append(Reference(ref.name, ref.subject, v))
            for name, definition in named_definitions(self.resolved_schema(entry.id)).items():
                definitions.setdefault(name, definition)
        try:
            resolved = inline(value, definitions) if definitions else value
            if definitions and json_depth(resolved) > MAX_SCHEMA_DEPTH:
                raise _too_deep("the schema with its references")
            parse_schema_text(json.dumps(resolved))  # text: a parsed "string" is a name, not JSON
            canon = canonical(value)
        except RecursionError:
            raise _too_deep("the schema") from None
        except SchemaError as exc:
            raise _invalid_schema(str(exc)) from exc
        return ParsedSchema(canon, tuple(fixed), resolved)

    def _reference_target(self, ref: Reference, lookup_deleted: bool) -> tuple[int, VersionEntry]:
        entries = self.store.version_entries(ref.subject)
        if ref.version == LATEST:
            live = [v for v, e in entries.items() if not e.deleted]
            version = max(live, default=LATEST)
        else:
            version = ref.version
        entry = entries.get(version)
        if entry is None or (entry.deleted and not lookup_deleted):
            raise _invalid_schema(f"No schema reference found for subject \"{ref.subject}\" and version "
                                  f"{ref.version} (reference {ref.name!r})")
        return version, entry

    def schema_entry(self, schema_id: int) -> tuple[str, list[Reference]]:
        """(schema text, references) of an id; 40403 if unknown."""
        text = self.store.get_schema(schema_id)
        if text is None:
            raise RegistryHttpError(404, 40403, f"Schema {schema_id} not found")
        return split_stored(text)

    def schema_by_id(self, schema_id: int) -> dict:
        """GET /schemas/ids/{id}: ``{"schema"[, "references"]}``."""
        text, refs = self.schema_entry(schema_id)
        return _with_references({"schema": text}, refs)

    def resolved_schema(self, schema_id: int) -> Any:
        """The schema of an id with every reference inlined (cached: ids never change)."""
        hit = self._resolved.get(schema_id)
        if hit is not None:
            return hit
        text, refs = self.schema_entry(schema_id)
        value = json.loads(text)
        definitions: dict[str, Any] = {}
        for ref in refs:
            entry = self.store.version_entries(ref.subject).get(ref.version)
            if entry is None:  # removed for good by a store written before references were guarded
                raise RegistryHttpError(
                    404, 40403, f"Schema {schema_id} refers to subject '{ref.subject}' version {ref.version}, "
                    "which no longer exists")
            for name, definition in named_definitions(self.resolved_schema(entry.id)).items():
                definitions.setdefault(name, definition)
        resolved = inline(value, definitions) if definitions else value
        self._resolved[schema_id] = resolved
        return resolved

    def _resolved_list(self, ids: list[int]) -> list[Any]:
        return [self.resolved_schema(i) for i in ids]

    def _check(self, parsed: ParsedSchema, previous_ids: list[int], level: str) -> list[str]:
        try:
            return compatibility.check(parsed.resolved, self._resolved_list(previous_ids), level)
        except RecursionError:
            raise _too_deep("the schema or an earlier version") from None

    def register(self, subject: str, schema_text: Any, references: Any = None, *,
                 schema_id: int | None = None, version: int | None = None) -> int:
        """Register under ``subject``; the same schema again returns its existing id.

        A schema whose only version in the subject is soft-deleted gets a new version with
        the same id, and the soft-deleted versions holding that id go for good (Confluent).
        ``schema_id`` (and ``version``) come with imports: only in IMPORT mode, which
        keeps the id and skips compatibility checks.

        Raises:
            RegistryHttpError: 422 invalid schema, subject or reference; 409 incompatible
                (message names field and rule); 42205 the mode forbids it.
        """
        check_subject(subject)
        with self.store.write_lock():
            mode = self.mode(subject)
            if mode == READONLY:
                raise _read_only(subject)
            if schema_id is not None and mode != IMPORT:
                raise RegistryHttpError(
                    422, 42205, f"Subject '{subject}' is not in import mode (mode {mode}): a schema with "
                    f"an id ({schema_id}) registers only in IMPORT mode (PUT /mode/{{subject}})")
            if schema_id is None and mode == IMPORT:
                raise RegistryHttpError(
                    422, 42205, f"Subject '{subject}' is not in read-write mode (mode IMPORT): only schemas "
                    "with an 'id' are registered; set READWRITE to register new ones")
            parsed = self.parse(schema_text, references)
            if schema_id is not None:
                return self._import(subject, parsed, schema_id, version)
            entries = self.store.version_entries(subject)
            live = {v: e.id for v, e in entries.items() if not e.deleted}
            existing_id = self.store.find_id(parsed.stored)
            if existing_id is not None and existing_id in live.values():
                return existing_id
            level = self.level(subject)
            problems = self._check(parsed, [live[v] for v in sorted(live)], level)
            if problems:
                raise RegistryHttpError(
                    409, 40901,
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f"\"{subject}\" ({len(problems)} problem(s)): " + "; ".join(problems))
            new_id = existing_id if existing_id is not None else self.store.add_schema(parsed.stored)
            new_version = self.store.add_version(subject, new_id)
            for v, e in entries.items():
                if e.deleted and e.id == new_id and not self._referenced_by(subject, v, True):
                    self.store.remove_version(subject, v)
        log.info("registered subject %s version %d as schema id %d", subject, new_version, new_id)
        return new_id

    def _import(self, subject: str, parsed: ParsedSchema, schema_id: int, version: int | None) -> int:
        """IMPORT mode: keep the given id (and version); caller holds the write lock."""
        if not 1 <= schema_id <= MAX_VERSION:
            raise _invalid_schema(f"id {schema_id} is not in [1, 2^31-1]")
        if version is not None:
            parse_version(str(version))  # 42202 unless in [1, 2^31-1]
        held = self.store.get_schema(schema_id)
        if held is not None and held != parsed.stored:
            raise RegistryHttpError(
                422, 42205, f"Overwrite new schema with id {schema_id} in context . is not permitted: "
                "the id holds another schema")
        entries = self.store.version_entries(subject)
        if version is None:
            for v, e in sorted(entries.items(), reverse=True):
                if e.id == schema_id and not e.deleted:
                    return schema_id
            version = max(entries, default=0) + 1
        elif version in entries:
            if entries[version].id == schema_id:
                return schema_id
            raise RegistryHttpError(
                422, 42205, f"Subject '{subject}' version {version} already holds schema id "
                f"{entries[version].id}; an imported version never overwrites another")
        if held is None:
            self.store.put_schema(schema_id, parsed.stored)
        self.store.put_version(subject, version, schema_id)
        log.info("imported subject %s version %d as schema id %d", subject, version, schema_id)
        return schema_id

    def lookup(self, subject: str, schema_text: Any, deleted: bool = False, references: Any = None) -> dict:
        """The version of ``subject`` holding this schema (POST /subjects/{s})."""
        parsed = self.parse(schema_text, references, lookup_deleted=True)
        entries = self._entries(subject, deleted)
        schema_id = self.store.find_id(parsed.stored)
        for v, e in sorted(entries.items(), reverse=True):
            if e.id == schema_id:
                return _with_references({"subject": subject, "version": v, "id": e.id, "schema": parsed.canonical},
                                        parsed.references)
        raise RegistryHttpError(404, 40403, f"Schema not found under subject '{subject}'")

    def schema_versions(self, schema_id: int, deleted: bool = False) -> list[dict]:
        """Every (subject, version) holding ``schema_id`` (GET /schemas/ids/{id}/versions)."""
        self.schema_entry(schema_id)
        out = []
        for subject in self.store.subjects():
            for v, e in sorted(self.store.version_entries(subject).items()):
                if e.id == schema_id and (deleted or not e.deleted):
                    out.append({"subject": subject, "version": v})
        return out

    def schema_subjects(self, schema_id: int, deleted: bool = False) -> list[str]:
        """Subjects holding ``schema_id`` (GET /schemas/ids/{id}/subjects)."""
        return list(dict.fromkeys(sv["subject"] for sv in self.schema_versions(schema_id, deleted)))

    def schemas(self, prefix: str = "", deleted: bool = False, latest_only: bool = False) -> list[dict]:
        """GET /schemas: every version of every subject under ``prefix`` (``latest_only``: one per subject)."""
        out = []
        for subject in self.store.subjects():
            if not subject.startswith(prefix):
                continue
            versions = sorted((v, e) for v, e in self.store.version_entries(subject).items()
                              if deleted or not e.deleted)
            for v, e in versions[-1:] if latest_only else versions:
                text, refs = self.schema_entry(e.id)
                out.append(_with_references({"subject": subject, "version": v, "id": e.id, "schema": text}, refs))
        return out

    # --- references ---------------------------------------------------------------------

    def _referenced_by(self, subject: str, version: int, deleted: bool) -> list[int]:
        """Ids whose references name (subject, version), held by a live version (``deleted``: any)."""
        holders: dict[int, bool] = {}  # id -> held by a live version
        for s in self.store.subjects():
            for e in self.store.version_entries(s).values():
                holders[e.id] = holders.get(e.id, False) or not e.deleted
        out = []
        for schema_id, live in sorted(holders.items()):
            if not (live or deleted):
                continue
            text = self.store.get_schema(schema_id)
            if text is None:
                continue
            if any(r.subject == subject and r.version == version for r in split_stored(text)[1]):
                out.append(schema_id)
        return out

    def referenced_by(self, subject: str, version: str, deleted: bool = False) -> list[int]:
        """GET /subjects/{s}/versions/{v}/referencedby: ids of the schemas that reference it."""
        v, _ = self._resolve(subject, version, deleted)
        return self._referenced_by(subject, v, deleted)

    def _refuse_if_referenced(self, subject: str, version: int, deleted: bool, ignore_subject: bool = False) -> None:
        ids = self._referenced_by(subject, version, deleted)
        if ignore_subject:
            ids = [i for i in ids if any(s != subject for s in self.schema_subjects(i, True))]
        if ids:
            raise RegistryHttpError(
                422, 42206, f"One or more references exist to the schema {{subject={subject},version={version}}}: "
                f"schema id(s) {ids[:20]} refer to it; delete those first")

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
        text, refs = self.schema_entry(entry.id)
        return _with_references({"subject": subject, "version": v, "id": entry.id, "schema": text}, refs)

    # --- deletes ----------------------------------------------------------------------------

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        """Soft-delete a version, or remove a soft-deleted one for good (``permanent``)."""
        with self.store.write_lock():
            if self.mode(subject) == READONLY:
                raise _read_only(subject)
            v, entry = self._resolve(subject, version, deleted=True)
            if entry.deleted and not permanent:
                raise RegistryHttpError(
                    404, 40406, f"Subject '{subject}' Version {v} was soft deleted. "
                    "Set permanent=true to delete permanently")
            self._refuse_if_referenced(subject, v, deleted=permanent)
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
            if self.mode(subject) == READONLY:
                raise _read_only(subject)
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
            gone = sorted(entries) if permanent else live
            for v in gone:  # references from the subject's own versions do not count (Confluent)
                self._refuse_if_referenced(subject, v, deleted=permanent, ignore_subject=True)
            if permanent:
                for v in reversed(gone):
                    self.store.remove_version(subject, v)
                self.store.delete_config(subject)
                self.store.delete_mode(subject)
            else:
                for v in live:
                    self.store.mark_deleted(subject, v, entries[v].id)
        log.info("%s deleted subject %s versions %s", "permanently" if permanent else "soft", subject, gone)
        return gone

    # --- compatibility ---------------------------------------------------------------------

    def test_compatibility(self, subject: str, schema_text: Any, version: str | None,
                           verbose: bool = False, references: Any = None) -> dict:
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
            parsed = self.parse(schema_text, references)
        except RegistryHttpError as exc:
            if not verbose:
                raise
            return {"is_compatible": False, "messages": [exc.message]}
        problems = self._check(parsed, previous_ids, level)
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
        if subject is not None:
            check_subject(subject)
        if self.mode(subject) == READONLY:
            raise _read_only(subject)
        level = level.upper()
        self.store.set_config(subject, level)
        return level

    def delete_level(self, subject: str | None) -> str:
        """DELETE /config/{s}: drop the subject's own level (40401 if it has none, as Confluent).

        DELETE /config (``subject`` None): back to the default level; returns the level it had.
        """
        with self.store.write_lock():
            if self.mode(subject) == READONLY:
                raise _read_only(subject)
            own = self.store.get_config(subject)
            if own is None:
                if subject is not None:
                    raise _subject_not_found(subject)
                return self.default_level
            self.store.delete_config(subject)
        return own

    # --- modes -----------------------------------------------------------------------------

    def mode(self, subject: str | None = None) -> str:
        """The mode in force for ``subject``: its own, else the global one, else READWRITE."""
        if subject is not None:
            own = self.store.get_mode(subject)
            if own:
                return own
        return self.store.get_mode(None) or DEFAULT_MODE

    def subject_mode(self, subject: str) -> str:
        own = self.store.get_mode(subject)
        if own is None:
            raise RegistryHttpError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return own

    def set_mode(self, subject: str | None, mode: Any, force: bool = False) -> str:
        """PUT /mode[/{s}]. IMPORT needs an empty scope (no live subject) unless ``force``;
        the soft-deleted versions left in it go for good, as in Confluent."""
        if not isinstance(mode, str) or _MODE_ALIASES.get(mode.upper(), mode.upper()) not in MODES:
            raise RegistryHttpError(
                422, 42204, f"Invalid mode {mode!r}. Valid values are {', '.join(MODES)} "
                "(READONLY_OVERRIDE is read as READONLY; FORWARD is not supported)")
        if subject is not None:
            check_subject(subject)
        mode = _MODE_ALIASES.get(mode.upper(), mode.upper())
        with self.store.write_lock():
            if mode == IMPORT and self.mode(subject) != IMPORT and not force:
                scope = [subject] if subject is not None else self.store.subjects()
                busy = [s for s in scope if self.store.versions(s)]
                if busy:
                    raise RegistryHttpError(
                        422, 42205, f"Cannot import since found existing subjects ({', '.join(busy[:5])}"
                        f"{' ...' if len(busy) > 5 else ''}); delete them or set the mode with force=true")
                for s in scope:
                    for v in sorted(self.store.version_entries(s)):
                        self._refuse_if_referenced(s, v, deleted=True)
                    for v in sorted(self.store.version_entries(s)):
                        self.store.remove_version(s, v)
            self.store.set_mode(subject, mode)
        log.info("mode of %s set to %s", "the registry" if subject is None else f"subject {subject}", mode)
        return mode

    def delete_mode(self, subject: str | None) -> str:
        """DELETE /mode[/{s}]: drop the subject's own mode (40401 if none) or the global one; returns it."""
        with self.store.write_lock():
            own = self.store.get_mode(subject)
            if own is None:
                if subject is not None:
                    raise _subject_not_found(subject)
                return DEFAULT_MODE
            self.store.delete_mode(subject)
        return own


def _read_only(subject: str | None) -> RegistryHttpError:
    who = "The registry" if subject is None else f"Subject '{subject}'"
    return RegistryHttpError(422, 42205, f"{who} in context . is in read-only mode; PUT /mode"
                             f"{'' if subject is None else '/' + subject} {{\"mode\": \"READWRITE\"}} to change it")


def _with_references(body: dict, refs: Any) -> dict:
    """Confluent omits ``references`` when there are none."""
    if refs:
        body["references"] = [r.to_json() for r in refs]
    return body
