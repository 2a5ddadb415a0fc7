"""The shell commands written in README.md and docs/*.md, with their page and line.

Read by tests/project/test_docs_commands.py (and ``python -m tests.harness.doc_commands``).
What counts as a command:

- every line of a fenced block labelled ``bash``, ``sh``, ``shell`` or ``console``
  (in a ``console`` block, or any block with ``$ `` prompts, only the ``$ `` lines:
  the others are output);
- in an unlabelled or ``text`` block, a line indented at most 4 spaces whose first
  word is a program (``ingest``, ``spark-submit``, ``.venv/bin/...``, ``./scripts/...``,
  ...; see PROGRAMS), or a ``$ `` prompt line;
- an inline code span whose first word is such a program and that has an option
  (``-x``) or a path argument: a command a reader would paste. A span without
  either (``ingest loader status`` in prose), and every span inside a generated block
  (the module map), is a *mention*: its subcommand and options must exist, how it is
  spelled on PATH is not checked.

Lines ending in ``\\`` continue; a quote left open continues on the next line; heredoc
bodies are skipped; ``# ...`` comments are dropped by the tokenizer (shlex).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console", "zsh"})
TEXT_LANGS = frozenset({"", "text", "txt"})
# first words that make a line of an unlabelled block (or an inline span) a command
PROGRAMS = frozenset({"ingest", "spark-submit", "python", "python3", "pip", "pip3", "pytest",
                      "airflow", "echo", "export", "curl", "docker", "kubectl", "tar", "venv-pack"})
SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "|&"})
REDIRECTS = frozenset({">", ">>", "<", "<<", "2>", "&>", ">&", "<<<"})
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER_ANGLE = re.compile(r"<[A-Za-z_][\w .:/-]*>")
PLACEHOLDER_WORD = re.compile(r"^[A-Z][A-Z0-9_]*(?:[:,][A-Z0-9_\[\],.]*)*$")
GENERATED_BLOCK = re.compile(r"<!-- BEGIN GENERATED .*?<!-- END GENERATED [^>]*-->", re.S)
ELSEWHERE = "<cwd>"  # env key set once a block has left the repository root with `cd`
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every docs/*.md, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass
class Command:
    """One simple command (pipelines and ``&&`` lists are split) as written on a page."""

    page: str
    line: int
    text: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    synopsis: bool = False   # has [optional] parts, ..., or PLACEHOLDERS: options checked, not parsed
    mention: bool = False    # an inline ``ingest sub`` name in prose: only the subcommand is checked

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _is_program(word: str) -> bool:
    if word.endswith(":"):
        return False  # `jobs/load.py: error: ...` is output, not a command
    return (word in PROGRAMS or word.startswith((".venv", "./", "scripts/", "bench/", "jobs/"))
            or bool(ENV_ASSIGNMENT.match(word)))


def fenced_blocks(text: str):
    """(language, first body line number, body lines) of every fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        yield lang, start + 1, lines[start:i]
        i += 1


def _logical_lines(body: list[str], first_line: int, select):
    """(line number, text) of each command in a block, joining continuations, skipping heredocs."""
    i = 0
    while i < len(body):
        raw, number = body[i], first_line + i
        i += 1
        text = select(raw)
        if text is None:
            continue
        while True:
            if text.rstrip().endswith("\\") and i < len(body):
                text = text.rstrip()[:-1] + " " + body[i].strip()
                i += 1
                continue
            try:
                shlex.split(text, comments=True)
            except ValueError:  # an open quote: the command goes on (python -c '...')
                if i < len(body):
                    text += "\n" + body[i]
                    i += 1
                    continue
            break
        heredoc = HEREDOC.search(text)
        if heredoc:
            while i < len(body) and body[i].strip() != heredoc.group(1):
                i += 1
            i += 1
        yield number, text


def strip_comments(text: str) -> str:
    """Drop ``# ...`` where the shell would: a ``#`` starting a word outside quotes (not ``x.tar.gz#env``)."""
    out, quote, previous = [], "", " "
    lines = iter(text.split("\n"))
    for line in lines:
        kept = []
        for ch in line:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and previous in " \t":
                break
            kept.append(ch)
            previous = ch
        out.append("".join(kept))
        previous = " "
    return "\n".join(out)


def tokenize(text: str) -> list[str]:
    """Shell words with ``|``, ``&&``, ``;`` and redirections as their own tokens; comments dropped."""
    text = strip_comments(PLACEHOLDER_ANGLE.sub("PLACEHOLDER", text))
    text = re.sub(r"(?<![\w-])\d?>&\d", " ", text)        # 2>&1: no target word
    text = re.sub(r"(?<![\w-])\d(>>?)", r" \1", text)      # 2>file: the redirection, then its target
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def split_commands(page: str, line: int, text: str, exported: dict[str, str], *, mention: bool = False):
    """The simple commands of one logical line; ``export X=Y`` adds to ``exported`` for later lines."""
    tokens = tokenize(text.replace("\\|", "|") if mention else text)
    synopsis = bool(re.search(r"(^|\s)\[|\.\.\.", text)) or "PLACEHOLDER" in " ".join(tokens)
    commands, current, depth = [], [], 0
    for index, token in enumerate(tokens + [";"]):
        depth = max(0, depth + token.count("[") - token.count("]"))  # local[2] nets 0
        if token in SEPARATORS and depth > 0 and index < len(tokens):
            continue  # `[--store DIR | --zk CONNECT]`: alternatives of a synopsis, not a pipe
        if token not in SEPARATORS:
            current.append(token)
            continue
        words, skip = [], False
        for word in current:
            if skip:
                skip = False
            elif word in REDIRECTS or re.fullmatch(r"\d?>+&?\d*", word):
                skip = not word.endswith(tuple("0123456789"))  # 2>&1 has its target inside
            else:
                words.append(word)
        current = []
        env = dict(exported)
        while words and ENV_ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if not words:
            continue
        if words[0] == "cd":  # later relative paths are not the repo root's: not checked
            exported[ELSEWHERE] = words[1] if len(words) > 1 else "~"
            continue
        if words[0] == "export":
            for word in words[1:]:
                if ENV_ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    exported[name] = value
            continue
        cleaned = []
        for word in words:
            if word.startswith("[") and not word.startswith("[{"):
                word = word.lstrip("[")
            if word.endswith("]") and word.count("]") > word.count("["):
                word = word[: len(word) - (word.count("]") - word.count("["))]
            if word and not word.endswith("...") and word != "|":
                cleaned.append(word)
        placeholders = any(PLACEHOLDER_WORD.match(w) for w in cleaned[1:] if not w.startswith("-"))
        commands.append(Command(page, line, text.strip(), cleaned, env,
                                synopsis=synopsis or placeholders, mention=mention))
    return commands


def block_commands(path: Path, root: Path = ROOT) -> list[Command]:
    page = _rel(path, root)
    out: list[Command] = []
    for lang, first, body in fenced_blocks(path.read_text(encoding="utf-8")):
        if lang not in SHELL_LANGS and lang not in TEXT_LANGS:
            continue
        prompts = lang == "console" or any(l.lstrip().startswith("$ ") for l in body)

        def select(raw: str, lang=lang, prompts=prompts):
            stripped = raw.strip()
            if prompts:
                return stripped[2:] if stripped.startswith("$ ") else None
            if lang in SHELL_LANGS:
                return stripped or None
            indent = len(raw) - len(raw.lstrip())
            words = stripped.split()
            output = any(w.endswith(":") for w in words[1:3])  # `ingest broker: error: ...`
            return stripped if words and indent <= 4 and _is_program(words[0]) and not output else None

        exported: dict[str, str] = {}
        for number, text in _logical_lines(body, first, select):
            out.extend(split_commands(page, number, text, exported))
    return out


def strip_fences(text: str) -> str:
    """The page with fenced blocks blanked (line numbers kept)."""
    return re.sub(r"^\s*```.*?^\s*```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)


def inline_commands(path: Path, root: Path = ROOT) -> list[Command]:
    """Inline spans: a bare ``ingest``/``airflow`` with an option or a path argument, or any program
    written as a path (``.venv/bin/ingest demo``), is a command (its options are checked, and PATH
    applies); ``spark-submit ...``, ``python -m venv``, ``pip install -e``, ``jobs/x.py --opt`` and
    ``ingest sub`` in prose are mentions (fragments: their subcommands and options must exist)."""
    page = _rel(path, root)
    text = strip_fences(path.read_text(encoding="utf-8"))
    generated = [(g.start(), g.end()) for g in GENERATED_BLOCK.finditer(text)]
    out: list[Command] = []
    for m in re.finditer(r"(?<!`)`([^`\n]+)`(?!`)", text):
        span = m.group(1).strip()
        words = span.split()
        if len(words) < 2 or not _is_program(words[0]) or any(w.endswith(":") for w in words[1:3]):
            continue  # one word is a name; `ingest mirror: error: ...` is output
        program = next((w for w in words if not ENV_ASSIGNMENT.match(w)), "")
        args = words[words.index(program) + 1:] if program else []
        explicit = program.startswith((".venv", "./", "scripts/"))
        in_generated = any(a <= m.start() < b for a, b in generated)  # a module map names commands
        mention = in_generated or not explicit and (program not in ("ingest", "airflow")
                                                    or not any(a.startswith("-") or "/" in a for a in args))
        if not (explicit or program in PROGRAMS or program.startswith(("jobs/", "bench/"))):
            continue
        line = text.count("\n", 0, m.start()) + 1
        try:
            found = split_commands(page, line, span, {}, mention=mention)
        except ValueError:
            continue  # not shell (an unbalanced quote in prose)
        for command in found:
            command.synopsis = True  # a span shows a command's shape; its required options are not checked
        out.extend(found[:1] if mention else found)
    return out


def config_comment_commands(path: Path, root: Path = ROOT) -> list[Command]:
    """Commands in a conf/*.properties comment: ``#   .venv/bin/ingest ...`` or ``# Run: ...``."""
    out: list[Command] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^#\s*(?:[A-Z][a-z]+:\s+)?(\S.*)$", line)
        if m and len(m.group(1).split()) > 1 and _is_program(m.group(1).split()[0]) and "/" in m.group(1).split()[0]:
            out.extend(split_commands(_rel(path, root), number, m.group(1), {}))
    return out


def config_examples(root: Path = ROOT) -> list[Path]:
    return sorted((root / "conf").glob("*.properties"))


def commands(root: Path = ROOT) -> list[Command]:
    out: list[Command] = []
    for path in config_examples(root):
        out.extend(config_comment_commands(path, root))
    for path in pages(root):
        out.extend(block_commands(path, root))
        out.extend(inline_commands(path, root))
    return sorted(out, key=lambda c: (c.page, c.line))
