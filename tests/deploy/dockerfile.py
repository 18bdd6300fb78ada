"""Read Dockerfiles and .dockerignore files the way BuildKit does, for static checks.

No Docker engine exists on the build machines: the tests parse instructions (line
continuations, comments, parser directives, JSON and shell forms, ``ARG`` defaults in
``FROM``) and resolve build-context paths through ``.dockerignore``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9_-]*)\s*=\s*(.*)$")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_FLAG = re.compile(r"^--[a-z-]+(=\S*)?$")


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    value: str  # everything after the keyword, continuations joined
    line: int

    @property
    def exec_form(self) -> list[str] | None:
        """The JSON (exec) form's arguments, or None for the shell form."""
        if not self.value.startswith("["):
            return None
        try:
            parsed = json.loads(self.value)
        except json.JSONDecodeError:
            return None
        if isinstance(parsed, list) and all(isinstance(p, str) for p in parsed):
            return parsed
        return None


@dataclass
class Stage:
    base: str  # the image reference, build ARGs resolved
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    path: Path
    directives: dict[str, str]
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(path: Path) -> Dockerfile:
    directives, instructions = _instructions(path.read_text(encoding="utf-8"))
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = [w for w in instruction.value.split() if not w.startswith("--platform")]
            base = _substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            if instruction.keyword != "ARG":
                raise ValueError(f"{path}:{instruction.line}: {instruction.keyword} before FROM")
            key, _, default = instruction.value.partition("=")
            global_args[key.strip()] = default.strip().strip('"')
        else:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise ValueError(f"{path}: no FROM")
    return Dockerfile(path, directives, global_args, stages)


def _instructions(text: str) -> tuple[dict[str, str], list[Instruction]]:
    directives: dict[str, str] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines) and (match := _DIRECTIVE.match(lines[index])):
        directives[match.group(1).lower()] = match.group(2).strip()
        index += 1
    instructions: list[Instruction] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(lines[index:], start=index + 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments and blank lines may sit inside a continued instruction
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].strip())
            continue
        buffer.append(stripped)
        keyword, _, value = " ".join(buffer).partition(" ")
        instructions.append(Instruction(keyword.upper(), value.strip(), start))
        buffer = []
    if buffer:
        raise ValueError(f"line {start}: unterminated continuation")
    return directives, instructions


def _substitute(text: str, args: dict[str, str]) -> str:
    return _VARIABLE.sub(lambda m: args.get(m.group(1) or m.group(2), ""), text)


def copy_sources(instruction: Instruction) -> list[str]:
    """Build-context sources of a COPY/ADD without ``--from`` (empty when it has one)."""
    words = instruction.exec_form or shlex.split(instruction.value)
    flags = [w for w in words if _FLAG.match(w)]
    if any(f.startswith("--from") for f in flags):
        return []
    paths = [w for w in words if w not in flags]
    return paths[:-1]


def healthcheck_command(instruction: Instruction) -> list[str]:
    """The CMD of a HEALTHCHECK instruction, in exec form."""
    _, _, command = instruction.value.partition("CMD")
    if not command:
        raise ValueError(f"line {instruction.line}: HEALTHCHECK without CMD")
    return Instruction("CMD", command.strip(), instruction.line).exec_form or [
        "/bin/sh",
        "-c",
        command.strip(),
    ]


class DockerIgnore:
    """``.dockerignore`` matching: last matching pattern wins, ``!`` re-includes, a pattern
    that matches a directory also matches everything inside it."""

    def __init__(self, text: str) -> None:
        self.patterns: list[tuple[re.Pattern[str], bool]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line[1:].strip() if negated else line
            self.patterns.append((_glob_regex(pattern.strip("/")), negated))

    def excluded(self, relative: str) -> bool:
        parts = Path(relative).as_posix().strip("/").split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        result = False
        for regex, negated in self.patterns:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                result = not negated
        return result


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
