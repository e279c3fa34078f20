"""The agent sessions factory work saw on this machine, for ``--resume-session``.

``.factory/sessions.json`` in the repository (never in a worktree, where the agent
writes) maps a task key to the preset, the session id its agent's own output named, the
worktree it ran in and the host. A retry resumes only a session recorded here for the
same task, preset, worktree path and host: an id the agent wrote into its checkpoint,
or one already recorded for another task, is never resumed (another task's session
holds another task's context).
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

from factory_client import files
from factory_client.client import FactoryError

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


def choose_resume(run) -> None:
    """With ``--resume-session``: the session this machine's factory work saw the
    preset's agent open for this task, in this worktree (``sessions``), if the
    attempt's checkpoint names the same one."""
    preset = run.options.preset
    if not (run.options.resume_session and preset and preset.resumes):
        return
    mine = recorded(run.options.repo, run.key, preset.name, run.workspace)
    said = (run.checkpoint_data or {}) if isinstance(run.checkpoint_data, dict) else {}
    theirs = (said.get("agent_session") or {}) if isinstance(said, dict) else {}
    if mine is None or not isinstance(theirs, dict) or theirs.get("id") != mine:
        run.steps("resume", "no session of this task to resume here; starting afresh")
        return
    run.resume = mine
    run.steps("resume", f"resuming {preset.name} session {mine}", session=mine)


def record_session(run) -> None:
    """Keep the agent's session id: on this machine for a retry (``sessions``) and
    in the attempt's checkpoint, where the next attempt's brief shows it."""
    if run.parser is None or not run.options.preset.resumes:
        return
    session = run.parser.snapshot().session_id
    if session is None:
        return
    if not record(run.options.repo, run.key, run.options.preset.name, run.workspace, session):
        run.steps("session", f"session {session} is another task's: not kept")
        return
    data = run.checkpoint_data if isinstance(run.checkpoint_data, dict) else {}
    current = run._read("checkpoint.json")
    try:
        loaded = json.loads(current) if current is not None else {}
    except ValueError:
        loaded = {}
    data = loaded if isinstance(loaded, dict) else {"agent_checkpoint": loaded}
    data["agent_session"] = {
        "preset": run.options.preset.name,
        "id": session,
        "worktree": str(run.workspace),
    }
    with contextlib.suppress(FactoryError):
        saved = run.client.save_checkpoint(run.attempt_id, data, run.revision)
        run.revision = saved["revision"]
        run.steps("checkpoint", f"session {session} saved in the checkpoint", session=session)
