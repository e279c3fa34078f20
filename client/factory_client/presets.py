"""Presets: the coding-agent CLIs ``factory work --agent NAME`` knows how to run headless.

Each preset says the exact command line (checked against the CLI's own ``--help``, kept in
``tests/fixtures/agents/<name>/``), how the brief reaches the agent (stdin, or a file the
command names), which output parser reads its usage (``factory_client.streams``), and
whether and how it resumes its own session. The executable is looked up on the PATH, but
never in a directory inside the repository or the worktree: a repository that commits
``bin/claude`` must not have it run as the agent (``find_executable``). ``factory agents``
lists the presets with what was found (``describe``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BRIEF_FILE = ".factory/brief.md"
# A short prompt for the CLIs whose headless flag wants one; the brief itself is on
# stdin (gemini: "Appended to input on stdin") or attached (opencode ``--file``).
PROMPT = (
    "Do the task in the brief (" + BRIEF_FILE + "): change the code, run the tests, "
    "and leave the work uncommitted; factory work commits and submits it."
)
VERSION_TIMEOUT = 10  # seconds for ``--version``


@dataclass(frozen=True)
class Preset:
    """One agent CLI: ``argv(resume, extra)`` is the exact command, run in the worktree."""

    name: str
    title: str
    executable: str
    build: Callable[[str | None], list[str]]  # the arguments after the executable
    stdin: bool  # whether the brief goes on stdin
    parser: str  # the name of the output parser in factory_client.streams
    resumes: bool
    written_against: str  # the CLI version whose --help the flags were checked against
    needs_token: bool = False
    version_args: tuple[str, ...] = ("--version",)
    notes: str = ""
    model_flags: tuple[str, ...] = field(default=("-m", "--model"))

    def argv(self, executable: str, *, resume: str | None = None, extra: str = "") -> list[str]:
        """The command: the executable, the preset's flags, then ``--agent-args`` (shlex)."""
        if resume is not None and not self.resumes:
            raise ValueError(f"{self.name} cannot resume a session")
        return [executable, *self.build(resume), *shlex.split(extra)]

    def model_hint(self, extra: str) -> str | None:
        """The model ``--agent-args`` names (``-m X`` / ``--model X``), for CLIs whose output
        does not say which model it used."""
        words = shlex.split(extra)
        for i, word in enumerate(words):
            for flag in self.model_flags:
                if word == flag and i + 1 < len(words):
                    return words[i + 1]
                if flag.startswith("--") and word.startswith(flag + "="):
                    return word.split("=", 1)[1]
        return None


def _claude(resume):
    args = ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"]
    return [*args, "--resume", resume] if resume else args


def _codex(resume):
    if resume:
        # ``exec resume`` has no --sandbox: the same policy by its configuration key.
        return ["exec", "resume", "--json", "-c", 'sandbox_mode="workspace-write"', resume, "-"]
    return ["exec", "--json", "--sandbox", "workspace-write", "--color", "never", "-"]


def _gemini(resume):
    return ["--output-format", "stream-json", "--approval-mode", "auto_edit", "-p", PROMPT]


def _aider(resume):
    return [
        "--message-file",
        BRIEF_FILE,
        "--yes-always",
        "--no-auto-commits",
        "--no-dirty-commits",
        "--no-gitignore",
        "--no-check-update",
        "--no-analytics",
        "--no-pretty",
        "--no-fancy-input",
        # Its history files go where factory work keeps its own, never into the commit.
        "--input-history-file",
        ".factory/aider.input.history",
        "--chat-history-file",
        ".factory/aider.chat.history.md",
    ]


def _opencode(resume):
    args = ["run", "--format", "json", "--file", BRIEF_FILE]
    if resume:
        args += ["--session", resume]
    return [*args, PROMPT]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "claude",
            "Claude Code",
            "claude",
            _claude,
            stdin=True,
            parser="claude",
            resumes=True,
            written_against="2.1.197",
            notes="edits auto-accepted in the worktree; other tools as its settings allow",
            model_flags=("--model",),
        ),
        Preset(
            "codex",
            "Codex CLI",
            "codex",
            _codex,
            stdin=True,
            parser="codex",
            resumes=True,
            written_against="0.171.0",
            notes="its own sandbox: writes only in the worktree",
        ),
        Preset(
            "gemini",
            "Gemini CLI",
            "gemini",
            _gemini,
            stdin=True,
            parser="gemini",
            resumes=False,
            written_against="0.61.0",
            notes="edits auto-approved; --resume takes an index or 'latest', not an id",
        ),
        Preset(
            "aider",
            "aider",
            "aider",
            _aider,
            stdin=False,
            parser="aider",
            resumes=False,
            written_against="0.86.2",
            notes="reads the brief with --message-file; prints tokens and cost as text",
            model_flags=("--model",),  # its -m is --message
        ),
        Preset(
            "opencode",
            "opencode",
            "opencode",
            _opencode,
            stdin=False,
            parser="opencode",
            resumes=True,
            written_against="1.18.33",
            notes="the brief attached with --file; permissions as its configuration says",
        ),
    )
}


class MissingExecutable(Exception):
    """The preset's executable is on no usable PATH entry; the message names it."""


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def find_executable(name: str, *, outside: list[Path], path: str | None = None) -> Path | None:
    """The first ``name`` on ``path`` (default $PATH) that is an executable file, looking
    only in directories that are absolute and, once resolved, inside none of ``outside``
    (the repository, the worktree): an agent is never run from the code it works on."""
    roots = [Path(os.path.realpath(root)) for root in outside]
    for entry in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue  # "" and "." mean the current directory: the worktree itself
        directory = Path(os.path.realpath(entry))
        if _inside(directory, roots):
            continue
        candidate = directory / name
        real = Path(os.path.realpath(candidate))
        if _inside(real, roots):
            continue  # a link from a safe directory into the repository
        if real.is_file() and os.access(real, os.X_OK):
            return candidate
    return None


def require(preset: Preset, *, outside: list[Path]) -> Path:
    """The preset's executable, or ``MissingExecutable`` naming it and where it was looked for."""
    found = find_executable(preset.executable, outside=outside)
    if found is None:
        raise MissingExecutable(
            f"the {preset.name} preset needs `{preset.executable}` ({preset.title}) on the PATH,"
            " outside the repository; none was found"
        )
    return found


def version(executable: Path, preset: Preset) -> str:
    """What ``EXECUTABLE --version`` prints first (its first line), or why it could not say."""
    try:
        done = subprocess.run(
            [str(executable), *preset.version_args],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"no answer to --version within {VERSION_TIMEOUT} s"
    except OSError as exc:
        return f"cannot run: {exc.strerror}"
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    if done.returncode != 0:
        return f"--version exited {done.returncode}"
    return lines[0][:100] if lines else "(no version printed)"


def describe(*, outside: list[Path]) -> list[dict]:
    """One row per preset: name, title, executable, found (a path or None), version."""
    rows = []
    for preset in PRESETS.values():
        found = find_executable(preset.executable, outside=outside)
        rows.append(
            {
                "name": preset.name,
                "title": preset.title,
                "executable": preset.executable,
                "found": str(found) if found else None,
                "version": version(found, preset) if found else None,
                "written_against": preset.written_against,
                "resumes": preset.resumes,
            }
        )
    return rows
