"""The agent sessions factory work saw on this machine, for ``--resume-session``.

``.factory/sessions.json`` in the repository (never in a worktree, where the agent
writes) maps a task key to the preset, the session id its agent's own output named, the
worktree it ran in and the host. A retry resumes only a session recorded here for the
same task, preset, worktree path and host: an id the agent wrote into its checkpoint,
or one already recorded for another task, is never resumed (another task's session
holds another task's context).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from factory_client import files

FILE = ".factory/sessions.json"
MAX_FILE = 1 << 20


def _load(repo: Path) -> dict:
    try:
        with files.open_read(repo, FILE) as handle:
            content = handle.read(MAX_FILE + 1)
        data = json.loads(content) if len(content) <= MAX_FILE else {}
    except (OSError, ValueError, files.UnsafePath):
        return {}
    return data if isinstance(data, dict) else {}


def recorded(repo: Path, task: str, preset: str, worktree: Path) -> str | None:
    """The session to resume for ``task``, or None."""
    entry = _load(repo).get(task)
    if not isinstance(entry, dict):
        return None
    if (entry.get("preset"), entry.get("worktree"), entry.get("host")) != (
        preset,
        str(worktree),
        socket.gethostname(),
    ):
        return None
    session = entry.get("id")
    return session if isinstance(session, str) else None


def record(repo: Path, task: str, preset: str, worktree: Path, session: str) -> bool:
    """Keep ``session`` as ``task``'s; False (nothing written) when another task has it."""
    data = _load(repo)
    for key, entry in data.items():
        if key != task and isinstance(entry, dict) and entry.get("id") == session:
            return False
    data[task] = {
        "preset": preset,
        "id": session,
        "worktree": str(worktree),
        "host": socket.gethostname(),
    }
    files.write_file(repo, FILE, json.dumps(data, indent=2))
    return True
