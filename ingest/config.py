"""Typed, frozen configuration loaded from Kafka-style ``.properties`` files.

A component declares its keys once in a :class:`ConfigDef` (name, type,
default, one-line doc). ``ConfigDef.load(path)`` reads ``conf/*.properties``,
applies ``--set key=value`` overrides, validates every value and returns a
frozen :class:`Config`. An invalid value fails at start-up with the key, the
value and what is allowed; an unknown key fails with the closest known names
(typos never silently fall back to defaults).

Properties grammar (the Java subset operators use): ``key=value`` or
``key: value`` per line, ``#`` / ``!`` comments, surrounding blanks ignored.

Any value may be a secret reference, ``${env:NAME}``, ``${file:PATH}`` or
``${file:PATH:KEY}``, replaced when the config is parsed
(:mod:`ingest.config_providers`); secret keys print as ``[hidden]`` in ``repr``.
"""
from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ingest.config_providers import redact, resolve_all
from ingest.errors import ConfigError

REQUIRED: Any = object()
"""Sentinel default: the key must be given."""


# --- value types -------------------------------------------------------------------

# Numbers are written in ASCII, as Java's properties readers expect: Python's int() and float()
# would also take other scripts' digits ("４" is 4), "_" separators and "nan"/"inf".
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_int(raw: Any) -> int:
    """An int from an int or from text of ASCII digits with an optional sign (blanks around ignored).

    Raises:
        ValueError: anything else (other scripts' digits, ``_``, a fraction, a bool).
    """
    if isinstance(raw, bool):
        raise ValueError("booleans are not integers")
    if isinstance(raw, int):
        return raw
    text = str(raw).strip()
    if not _INT_TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not an integer written with ASCII digits")
    return int(text)


def parse_float(raw: Any) -> float:
    """A finite float from a number or from text of ASCII digits (optional sign, fraction, exponent).

    Raises:
        ValueError: anything else (other scripts' digits, ``_``, ``nan``, ``inf``, a bool).
    """
    if isinstance(raw, bool):
        raise ValueError("booleans are not numbers")
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif _FLOAT_TEXT.fullmatch(str(raw).strip()):
        value = float(str(raw).strip())
    else:
        raise ValueError(f"{str(raw).strip()!r} is not a number written with ASCII digits")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{value} is not a finite number")
    return value


def non_ascii_note(raw: Any) -> str:
    """``"; it contains U+FF14 FULLWIDTH DIGIT FOUR, ..."`` for text with non-ASCII characters, else ``""``."""
    odd = list(dict.fromkeys(c for c in str(raw) if ord(c) > 127))
    if not odd:
        return ""
    names = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in odd[:3])
    return f"; it contains {names}{' ...' if len(odd) > 3 else ''} (write numbers with ASCII digits 0-9)"



class KeyType:
    """Parses a raw string (or an already-typed value) and describes what is allowed."""

    allowed: str = "any value"

    def parse(self, raw: Any) -> Any:  # pragma: no cover - overridden
        return raw


@dataclass(frozen=True)
class Int(KeyType):
    lo: int | None = None
    hi: int | None = None

    @property
    def allowed(self) -> str:  # type: ignore[override]
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "+inf" if self.hi is None else str(self.hi)
        return f"an integer in [{lo}, {hi}]"

    def parse(self, raw: Any) -> int:
        value = parse_int(raw)
        if self.lo is not None and value < self.lo:
            raise ValueError(f"{value} < {self.lo}")
        if self.hi is not None and value > self.hi:
            raise ValueError(f"{value} > {self.hi}")
        return value


@dataclass(frozen=True)
class Float(KeyType):
    lo: float | None = None
    hi: float | None = None

    @property
    def allowed(self) -> str:  # type: ignore[override]
        return f"a number in [{self.lo if self.lo is not None else '-inf'}, {self.hi if self.hi is not None else '+inf'}]"

    def parse(self, raw: Any) -> float:
        value = parse_float(raw)
        if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
            raise ValueError(f"{value} out of range")
        return value


@dataclass(frozen=True)
class Bool(KeyType):
    allowed: str = "true or false"

    def parse(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        raise ValueError(text)


@dataclass(frozen=True)
class Str(KeyType):
    pattern: str | None = None
    nonempty: bool = False

    @property
    def allowed(self) -> str:  # type: ignore[override]
        if self.pattern:
            return f"a string matching {self.pattern}"
        return "a non-empty string" if self.nonempty else "a string"

    def parse(self, raw: Any) -> str:
        text = str(raw).strip()
        if self.nonempty and not text:
            raise ValueError("empty")
        if self.pattern and not re.fullmatch(self.pattern, text):
            raise ValueError(text)
        return text


@dataclass(frozen=True)
class Choice(KeyType):
    choices: tuple[str, ...] = ()

    @property
    def allowed(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(self.choices)

    def parse(self, raw: Any) -> str:
        text = str(raw).strip()
        if text not in self.choices:
            raise ValueError(text)
        return text


@dataclass(frozen=True)
class Regex(KeyType):
    allowed: str = "a Python regular expression"

    def parse(self, raw: Any) -> str:
        text = str(raw).strip()
        re.compile(text)
        return text


@dataclass(frozen=True)
class StrList(KeyType):
    """Comma-separated strings; blanks dropped."""

    allowed: str = "a comma-separated list"

    def parse(self, raw: Any) -> tuple[str, ...]:
        if isinstance(raw, (list, tuple)):
            return tuple(str(x).strip() for x in raw if str(x).strip())
        return tuple(p.strip() for p in str(raw).split(",") if p.strip())


@dataclass(frozen=True)
class IntMap(KeyType):
    """``name:int,name:int`` (Kafka's ``topic.partition.count.map`` style)."""

    lo: int | None = None
    hi: int | None = None

    @property
    def allowed(self) -> str:  # type: ignore[override]
        return f"comma-separated name:int pairs, ints in [{self.lo}, {self.hi}]"

    def parse(self, raw: Any) -> dict[str, int]:
        if isinstance(raw, Mapping):
            items = list(raw.items())
        else:
            items = []
            for part in str(raw).split(","):
                if not part.strip():
                    continue
                name, sep, num = part.rpartition(":")
                if not sep or not name.strip():
                    raise ValueError(f"'{part.strip()}' is not name:int")
                items.append((name.strip(), num))
        checker = Int(self.lo, self.hi)
        return {str(k): checker.parse(v) for k, v in items}


# --- keys and definitions ----------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One configuration key: its name, type, default and a one-line doc."""

    name: str
    type: KeyType
    default: Any = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class Config(Mapping[str, Any]):
    """A frozen, validated mapping from key name to typed value.

    ``cfg["log.dir"]`` returns the typed value (default applied). Immutable:
    derive a changed copy with :meth:`with_overrides`.
    """

    __slots__ = ("_definition", "_values", "_explicit")

    def __init__(self, definition: "ConfigDef", values: dict[str, Any], explicit: frozenset[str]):
        object.__setattr__(self, "_definition", definition)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_explicit", explicit)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is frozen; use with_overrides()")

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(f"'{key}' is not a key of {self._definition.name}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._definition.name}, {redact(self._values)!r})"

    def redacted(self) -> dict[str, Any]:
        """The values with every secret key's hidden (``[hidden]``): what may be printed or logged."""
        return redact(self._values)

    @property
    def definition(self) -> "ConfigDef":
        return self._definition

    def is_set(self, key: str) -> bool:
        """True when the key was given explicitly (not defaulted)."""
        return key in self._explicit

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        raw = {k: self._values[k] for k in self._explicit}
        raw.update(resolve_all(overrides, parse_properties))
        return self._definition.parse(raw, source="overrides", resolved=True)

    def as_properties(self) -> dict[str, str]:
        """Values rendered back to properties strings (for passing to subprocesses)."""
        out: dict[str, str] = {}
        for k, v in self._values.items():
            if v is None:
                continue
            if isinstance(v, bool):
                out[k] = "true" if v else "false"
            elif isinstance(v, dict):
                out[k] = ",".join(f"{a}:{b}" for a, b in v.items())
            elif isinstance(v, tuple):
                out[k] = ",".join(v)
            else:
                out[k] = str(v)
        return out


@dataclass(frozen=True)
class ConfigDef:
    """The declared keys of one component (broker, loader, audit, ...).

    Args:
        name: component name, used in messages and in the generated docs.
        keys: the keys; names must be unique.
        prefixes: key prefixes accepted without declaration (e.g. ``"spark."``
            passed through verbatim), kept as strings.
    """

    name: str
    keys: tuple[Key, ...]
    prefixes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [k.name for k in self.keys]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate config keys in {self.name}: {sorted(dupes)}")

    def key(self, name: str) -> Key:
        for k in self.keys:
            if k.name == name:
                return k
        raise KeyError(name)

    def extend(self, name: str, keys: Iterable[Key]) -> "ConfigDef":
        """A new definition with more keys (e.g. broker = log keys + server keys)."""
        return ConfigDef(name, self.keys + tuple(keys), self.prefixes)

    def parse(self, raw: Mapping[str, Any], *, source: str = "<dict>", resolved: bool = False) -> Config:
        """Validate ``raw`` and return a frozen Config.

        Secret references (``${env:NAME}``, ``${file:PATH}``, ``${file:PATH:KEY}``) are replaced
        first, unless ``resolved`` (values that were resolved already, and may hold ``${`` as text).

        Raises:
            ConfigError: naming the key, the value and what is allowed; or the
                unknown key with the closest known names; or a missing required key;
                or a secret reference that cannot be resolved (the key and the reference).
        """
        if not resolved:
            raw = resolve_all(raw, parse_properties)
        known = {k.name: k for k in self.keys}
        values: dict[str, Any] = {}
        explicit = set()
        for name, value in raw.items():
            if name in known:
                continue
            if any(name.startswith(p) for p in self.prefixes):
                values[name] = str(value)
                explicit.add(name)
                continue
            close = difflib.get_close_matches(name, list(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"{source}: unknown {self.name} config key '{name}'{hint}")
        for name, key in known.items():
            if name in raw and raw[name] is not None:
                value = raw[name]
                try:
                    values[name] = key.type.parse(value)
                except (ValueError, TypeError, re.error) as exc:
                    shown = redact({name: str(value)})[name]
                    raise ConfigError(
                        f"{source}: invalid value {shown!r} for '{name}': "
                        f"allowed is {key.type.allowed}{'' if shown != str(value) else non_ascii_note(value)}"
                    ) from exc
                explicit.add(name)
            elif key.required:
                raise ConfigError(f"{source}: missing required {self.name} config key '{name}' ({key.doc})")
            else:
                values[name] = key.default
        return Config(self, values, frozenset(explicit))

    def load(self, path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
        """Read a properties file (may be None for defaults only) plus overrides."""
        raw: dict[str, Any] = {}
        source = "defaults"
        if path is not None:
            raw.update(read_properties(path))
            source = str(path)
        if overrides:
            raw.update(overrides)
        return self.parse(raw, source=source)

    def markdown_table(self) -> str:
        """Every key, its default and meaning, as a Markdown table (docs/configuration.md and the docs pages)."""
        lines = ["| key | default | allowed | meaning |", "| --- | --- | --- | --- |"]
        for k in self.keys:
            default = "(required)" if k.required else ("" if k.default is None else render_value(k.default))
            cells = (f"`{k.name}`", f"`{default}`", k.type.allowed, k.doc)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # a | ends a cell
        return "\n".join(lines)


def render_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ",".join(f"{a}:{b}" for a, b in value.items())
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a ``.properties`` file into a dict of raw strings.

    Raises:
        ConfigError: the file is missing, is not UTF-8 text (e.g. a binary given by
            mistake), or a line is not ``key=value``.
    """
    p = Path(path)
    return parse_properties(read_text(p, "config file", "a UTF-8 .properties file of key=value lines"), source=str(p))


def read_text(path: str | Path, what: str, allowed: str) -> str:
    """The UTF-8 text of a file an operator named (``what``: "config file"; ``allowed``: what it must be).

    Raises:
        ConfigError: the file cannot be read, or is not UTF-8 text (a binary given by mistake).
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not a text file (byte {exc.object[exc.start]:#04x} at position "
                          f"{exc.start} is not UTF-8): allowed is {allowed}") from exc


def parse_properties(text: str, *, source: str = "<text>") -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", stripped)
        if not m:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {stripped!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` from ``--set`` flags into a dict; names a bad pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out
