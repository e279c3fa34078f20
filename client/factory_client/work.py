"""``factory work``: the agent loop, so any coding agent can work a task with nothing to glue.

For each task: claim it; prepare a git worktree of ``--repo`` on a branch named after
the attempt, at the project's default branch; write the brief to ``.factory/brief.md``;
run the agent command there while keeping the lease and saving
``.factory/checkpoint.json`` whenever the agent changes it; then either commit, push,
verify locally (self-reported evidence), attach and submit, or release the task with
the reason. Usage goes with the heartbeats and the submit: the wall time factory work
measures from the claim, and, with ``--agent NAME`` (``presets``), what the agent CLI's
own output says as it streams (``streams``, ``StreamMeter``), or, with ``-- CMD``, the
running totals the agent may keep in ``.factory/usage.json`` (``UsageMeter``). Every step prints one line (``--json``: one JSON object per line). Nothing
is hidden: a change outside the allowed paths is submitted and the gates say no.

Exit codes: 0 submitted, or nothing to claim; 1 the API refused; 2 usage, or the
repository is not clean; 3 the server could not be reached; 4 the task was released
(the agent failed, changed nothing, was blocked, or the push was refused); 5 the lease
was lost and the agent stopped; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from factory_client import files, presets, sessions, streams
from factory_client.client import FactoryClient, FactoryError
from factory_client.process import Agent
from factory_client.usage import StreamMeter, UsageMeter

EXIT_SUBMITTED, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_RELEASED, EXIT_LEASE_LOST, EXIT_INTERRUPTED, EXIT_TERMINATED = 4, 5, 130, 143
FACTORY_DIR = ".factory"
MAX_USAGE_FILE = 64 << 10  # bytes of .factory/usage.json read; a larger one is not read
SITE_SECRETS = ("FACTORY_TOKEN",)  # never in a preset's environment unless it needs them


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the loop; ``code`` is the exit code (130 or 143)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class Stop(Exception):
    """The loop cannot go on; ``code`` is the exit code and the message says why."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    command: list[str]
    repo: Path
    project: str | None = None
    labels: list[str] = field(default_factory=list)
    loop: bool = False
    max_tasks: int | None = None
    poll: float = 10.0
    lease: int = 300
    grace: float = 10.0
    timeout: float | None = None
    remote: str | None = None
    stdin: bool = True
    json: bool = False
    preset: presets.Preset | None = None
    executable: Path | None = None
    agent_args: str = ""
    resume_session: bool = False


class Steps:
    """Prints each step: one line a person can follow, or one JSON object per line."""

    def __init__(self, as_json: bool, out=None):
        self.as_json, self.out = as_json, out or sys.stdout

    def __call__(self, step: str, text: str, **data) -> None:
        if self.as_json:
            line = json.dumps({"step": step, **data, "message": text})
        else:
            line = f"factory work: {text}"
        print(line, file=self.out, flush=True)


PATIENCE = (1, 2, 4, 8, 15)  # seconds between tries while the server is away (30 s in all)


def patiently(call, *args, **kwargs):
    """``call`` again while the server cannot be reached or answers 5xx (it is restarting);
    a refusal (4xx) is raised at once. Only calls that are safe to repeat when their
    answer was lost go through here: the claim and the project (a lost claim's lease
    runs out), evidence (the bytes are stored once), the release, and the submit (its
    Idempotency-Key)."""
    for pause in (*PATIENCE, None):
        try:
            return call(*args, **kwargs)
        except FactoryError as exc:
            if pause is None or not (exc.status == 0 or exc.status >= 500):
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise Stop(EXIT_RELEASED, f"git {args[0]} failed: {said[-1] if said else done.returncode}")
    return done.stdout.strip()


def git_commit(repo: Path, message: str, *, check: bool = True) -> str:
    """Commit what is staged, as factory work (the agent's own identity is not assumed)."""
    return git(
        repo,
        *("-c", "user.name=factory work", "-c", "user.email=factory-work@localhost"),
        *("commit", "--quiet", "-m", message),
        check=check,
    )


def tracked_factory_dir(repo: Path, tree: str | None = None) -> list[str]:
    """What ``tree`` (the index of ``repo`` when None) holds under ``.factory``: the
    folder is factory work's own, and a repository that commits it could have committed
    links there that a write would follow."""
    if tree is None:
        listed = git(repo, "ls-files", "-z", "--", FACTORY_DIR)
    else:
        listed = git(repo, "ls-tree", "-r", "-z", "--name-only", tree, "--", FACTORY_DIR)
    return [name for name in listed.split("\0") if name]


def _refuse_tracked(names: list[str], where: str, code: int) -> None:
    if names:
        shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
        raise Stop(
            code,
            f"{where} tracks {FACTORY_DIR}/ ({shown}); factory work keeps its own files "
            "there and does not work in a repository that commits them",
        )


def check_clean(repo: Path) -> None:
    """Refuse (exit 2) a repository with uncommitted changes: the loop must not mix them in;
    nor one that tracks ``.factory/`` or whose ``.factory`` is a link."""
    if not (repo / ".git").exists() and git(repo, "rev-parse", "--git-dir", check=False) == "":
        raise Stop(EXIT_USAGE, f"{repo} is not a git repository (give --repo)")
    _refuse_tracked(tracked_factory_dir(repo), str(repo), EXIT_USAGE)
    try:
        files.refuse_link(repo, f"{FACTORY_DIR}/work")
        files.refuse_link(repo, f"{FACTORY_DIR}/logs")
    except files.UnsafePath as exc:
        raise Stop(EXIT_USAGE, f"{repo}: {exc}") from None
    dirty = [
        line
        for line in git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
        if not line[3:].startswith(f"{FACTORY_DIR}/")
    ]
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:5])
        raise Stop(
            EXIT_USAGE,
            f"{repo} has uncommitted changes ({shown}{', …' if len(dirty) > 5 else ''}); "
            "commit or stash them before factory work",
        )


def _exclude_factory_dir(repo: Path) -> None:
    exclude = Path(git(repo, "rev-parse", "--git-common-dir"))
    exclude = (exclude if exclude.is_absolute() else repo / exclude) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    if f"/{FACTORY_DIR}/" not in text.split():
        exclude.write_text(
            text + ("" if text.endswith("\n") or not text else "\n") + f"/{FACTORY_DIR}/\n"
        )


@dataclass
class Outcome:
    code: int
    message: str


class TaskRun:
    """One claimed task, from the worktree to the submit or the release."""

    def __init__(self, client: FactoryClient, options: Options, steps: Steps, claimed: dict):
        self.client, self.options, self.steps = client, options, steps
        self.task, self.attempt = claimed["task"], claimed["attempt"]
        self.key, self.attempt_id = self.task["key"], self.attempt["id"]
        self.name = f"{self.key}-attempt-{self.attempt['number']}"
        self.branch = f"factory/{self.key}/attempt-{self.attempt['number']}"
        self.project = patiently(client.project, self.task["project"])
        self.revision = 0
        self.checkpoint_digest = None
        self.checkpoint_data = None
        self.resume = None  # the agent session to resume, when --resume-session may
        preset = options.preset
        self.parser = (
            streams.PARSERS[preset.parser](preset.model_hint(options.agent_args))
            if preset is not None
            else None
        )
        self.usage = StreamMeter(self.parser) if self.parser else UsageMeter(self._read_usage)

    # --- the workspace ------------------------------------------------------------

    def prepare(self) -> Path:
        repo = self.options.repo
        _exclude_factory_dir(repo)
        branch = self.project.get("default_branch") or "main"
        remote = self.options.remote or self.project.get("repository_url")
        base = branch
        if remote:
            git(
                repo, "fetch", "--quiet", remote, f"+refs/heads/{branch}:refs/factory/base/{branch}"
            )
            base = f"refs/factory/base/{branch}"
        self.base = git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")
        _refuse_tracked(
            tracked_factory_dir(repo, self.base),
            f"the project's {branch} ({self.base[:12]})",
            EXIT_RELEASED,
        )
        # git follows links on the way to a worktree: there must be none.
        files.make_dirs(repo, f"{FACTORY_DIR}/work")
        # One path per task, whatever the attempt: agents keep their sessions by directory,
        # so a retry can resume the session only where it ran.
        files.refuse_link(repo, f"{FACTORY_DIR}/work/{self.key}")
        workspace = repo / FACTORY_DIR / "work" / self.key
        if workspace.exists():
            git(repo, "worktree", "remove", "--force", str(workspace))
        git(repo, "worktree", "add", "--quiet", "-B", self.branch, str(workspace), self.base)
        self.workspace = workspace
        self.factory = files.make_dirs(workspace, FACTORY_DIR)
        self.steps(
            "workspace",
            f"worktree {workspace} on branch {self.branch} at {branch} ({self.base[:12]})",
            path=str(workspace),
            branch=self.branch,
            base=self.base,
        )
        return workspace

    def write_brief(self) -> str:
        brief = getattr(self.client, "brief", None)
        context = self.client.context(self.key)
        text = brief(self.key) if brief is not None else json.dumps(context, indent=2)
        self._write("brief.md", text)
        self._write("context.json", json.dumps(context, indent=2))
        checkpoint = context.get("checkpoint")
        if checkpoint and checkpoint.get("data") is not None:
            self._write("checkpoint.json", json.dumps(checkpoint["data"], indent=2))
            self.checkpoint_data = checkpoint["data"]
            self.steps(
                "resume",
                f"resuming from the checkpoint of attempt #{checkpoint.get('attempt')}",
                attempt=checkpoint.get("attempt"),
            )
        for earlier in context.get("attempts") or []:
            landing = earlier.get("landing") or {}
            if landing.get("state") in ("conflict", "failed"):
                self.steps(
                    "landing",
                    f"attempt #{earlier['number']} was approved but came back from landing: "
                    f"{landing.get('reason', '')}",
                    attempt=earlier["number"],
                    landing=landing.get("state"),
                )
        self.checkpoint_digest = self._digest(self._read("checkpoint.json"))
        self.tests_criteria = [
            c["key"]
            for c in (context.get("spec") or {}).get("criteria", [])
            if (c.get("proof") or {}).get("check") == "tests"
        ]
        self.steps(
            "brief",
            f"brief written to {self.factory / 'brief.md'} ({len(text)} chars)",
            chars=len(text),
            sha256=context.get("bundle_sha256"),
        )
        return text

    def _write(self, name: str, text: str) -> None:
        """Write ``.factory/NAME`` in the workspace, never through a link (``UnsafePath``)."""
        try:
            files.write_file(self.workspace, f"{FACTORY_DIR}/{name}", text)
        except OSError as exc:
            said = f"{FACTORY_DIR}/{name} cannot be written ({exc.strerror})"
            raise Stop(EXIT_RELEASED, said) from None

    def _read(self, name: str) -> bytes | None:
        """``.factory/NAME`` as the agent left it (None: not there), never read through a
        link: what a link leads to must not reach the server (``UnsafePath``)."""
        try:
            return files.read_file(self.workspace, f"{FACTORY_DIR}/{name}")
        except OSError as exc:  # the agent made it unreadable: say so, rather than crash
            said = f"{FACTORY_DIR}/{name} cannot be read ({exc.strerror})"
            raise Stop(EXIT_RELEASED, said) from None

    def _read_usage(self) -> bytes | None:
        """``.factory/usage.json`` if it is a regular file of at most ``MAX_USAGE_FILE``
        bytes (a link or a FIFO is refused by ``files``; a larger file is not read)."""
        if not hasattr(self, "workspace"):
            return None
        try:
            with files.open_read(self.workspace, f"{FACTORY_DIR}/usage.json") as handle:
                content = handle.read(MAX_USAGE_FILE + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return None if len(content) > MAX_USAGE_FILE else content

    def choose_resume(self) -> None:
        sessions.choose_resume(self)

    def record_session(self) -> None:
        sessions.record_session(self)

    def report_usage(self) -> FactoryError | None:
        """Send what was used since the last heartbeat (a release carries none); the
        refusal when the attempt has ended (``budget_exhausted``, ``lease_lost``)."""
        increment = self.usage.pending()
        if not increment:
            return None
        try:
            self.client.heartbeat(self.attempt_id, self.options.lease, usage=increment)
        except FactoryError as exc:
            return exc if exc.status == 409 else None
        self.usage.sent(increment)
        return None

    @staticmethod
    def _digest(content: bytes | None) -> str | None:
        return None if content is None else hashlib.sha256(content).hexdigest()

    def save_checkpoint_if_changed(self) -> None:
        content = self._read("checkpoint.json")
        digest = self._digest(content)
        if digest is None or digest == self.checkpoint_digest:
            return
        try:
            data = json.loads(content)
        except ValueError:
            return  # half-written, or not JSON yet: the next look will tell
        saved = self.client.save_checkpoint(self.attempt_id, data, self.revision)
        self.revision, self.checkpoint_digest = saved["revision"], digest
        self.steps(
            "checkpoint", f"checkpoint saved (revision {self.revision})", revision=self.revision
        )

    # --- the agent -----------------------------------------------------------------

    def run_agent(self, brief: str) -> Outcome:
        brief_path = str(self.factory / "brief.md")
        preset = self.options.preset
        if preset is not None:
            argv = preset.argv(
                str(self.options.executable), resume=self.resume, extra=self.options.agent_args
            )
            inherited = {
                k: v for k, v in os.environ.items() if preset.needs_token or k not in SITE_SECRETS
            }
        else:
            argv = [part.replace("{brief}", brief_path) for part in self.options.command]
            inherited = dict(os.environ)
        stdin = self.options.stdin if preset is None else preset.stdin
        env = {
            **inherited,
            "FACTORY_TASK": self.key,
            "FACTORY_ATTEMPT": str(self.attempt_id),
            "FACTORY_ALLOWED_PATHS": json.dumps(self.task.get("allowed_paths", [])),
            "FACTORY_BRIEF": brief_path,
            "FACTORY_WORKSPACE": str(self.workspace),
        }
        log = f"{FACTORY_DIR}/logs/{self.name}.log"
        self.log_path = self.options.repo / log
        agent = Agent(
            argv,
            cwd=self.workspace,
            env=env,
            stdin_text=brief if stdin else None,
            log=files.open_write(self.options.repo, log),
            parser=self.parser,
        )
        self.steps(
            "agent",
            f"agent started: {shlex.join(argv)} (log {self.log_path})",
            pid=agent.process.pid,
            log=str(self.log_path),
        )
        started = time.monotonic()
        try:
            with self.client.keep_lease(
                self.attempt_id, self.options.lease, usage=self.usage
            ) as lease:
                while (code := agent.poll()) is None:
                    time.sleep(0.2)
                    self.save_checkpoint_if_changed()
                    if lease.lost is not None:
                        stopped = agent.stop(self.options.grace)
                        raise Stop(
                            EXIT_LEASE_LOST,
                            f"lease lost ({lease.lost.code}: {lease.lost.detail}); "
                            f"the agent was stopped (exit {stopped})",
                        )
                    if self.options.timeout and time.monotonic() - started > self.options.timeout:
                        stopped = agent.stop(self.options.grace)
                        return Outcome(
                            EXIT_RELEASED,
                            f"the agent ran past --timeout {self.options.timeout:g} s and was "
                            f"stopped (exit {stopped})",
                        )
                self.save_checkpoint_if_changed()
                agent.drained()
                self.record_session()
            seconds = time.monotonic() - started
            self.steps("agent", f"agent exited {code} after {seconds:.1f} s", exit_code=code)
            refused = self.parser.snapshot().refused if self.parser else []
            if refused:
                self.steps(
                    "usage",
                    f"{len(refused)} usage report(s) in the agent's output refused: {refused[0]}",
                    refused=refused[:10],
                )
            if code != 0:
                return Outcome(EXIT_RELEASED, f"the agent exited {code}")
            return Outcome(EXIT_SUBMITTED, "")
        except BaseException:
            if agent.poll() is None:
                agent.stop(self.options.grace)
            raise
        finally:
            agent.finish()

    # --- the end of the attempt -------------------------------------------------------

    def keep_unfinished(self, reason: str) -> None:
        """Commit what the agent left on the attempt's branch (locally), so nothing is lost."""
        if not hasattr(self, "workspace") or not self.workspace.exists():
            return
        git(self.workspace, "add", "-A", check=False)
        if git(self.workspace, "status", "--porcelain", check=False):
            git_commit(self.workspace, f"Unfinished: {reason}", check=False)
            self.steps("kept", f"unfinished work kept on branch {self.branch}", branch=self.branch)

    def release(self, reason: str, *, blocked: bool = False) -> None:
        self.keep_unfinished(reason)
        ended = self.report_usage()
        if ended is not None:  # the attempt is over: there is nothing to release
            self.steps("stopped", f"{self.key} not released: {ended.code}: {ended.detail}")
            return
        patiently(self.client.release, self.attempt_id, reason=reason, blocked=blocked)
        word = "blocked" if blocked else "released"
        self.steps(word, f"{self.key} {word}: {reason}", reason=reason, blocked=blocked)

    def conclude(self) -> int:
        blocked = self._read("blocked.md")
        if blocked is not None:
            reason = blocked.decode(errors="replace").strip()
            self.release(reason or "the agent is blocked", blocked=True)
            return EXIT_RELEASED
        summary = (self._read("summary.md") or b"").decode(errors="replace").strip()
        git(self.workspace, "add", "-A")
        uncommitted = bool(git(self.workspace, "status", "--porcelain"))
        # Some agents commit their own work (Claude Code and Codex may, when asked to):
        # what they committed on the attempt's branch is the change too.
        committed = git(self.workspace, "rev-parse", "HEAD") != self.base
        if not uncommitted and not committed:
            self.release("the agent changed nothing")
            return EXIT_RELEASED
        if not uncommitted:
            return self.submit_head(summary)
        title = summary.splitlines()[0] if summary else f"{self.key}: {self.task['title']}"
        message = "\n\n".join(
            part
            for part in (
                title,
                "\n".join(summary.splitlines()[1:]).strip(),
                f"Factory-Task: {self.key}\nFactory-Attempt: {self.attempt_id}",
            )
            if part
        )
        git_commit(self.workspace, message)
        return self.submit_head(summary or title, committed_here=True)

    def submit_head(self, summary: str, *, committed_here: bool = False) -> int:
        """Push, verify, attach and submit the attempt branch's head."""
        commit = git(self.workspace, "rev-parse", "HEAD")
        if not summary:
            summary = git(self.workspace, "log", "-1", "--format=%B", commit).strip()
        title = summary.splitlines()[0] if summary else f"{self.key}: {self.task['title']}"
        said = "committed" if committed_here else "the agent committed"
        self.steps("commit", f"{said} {commit[:12]} on {self.branch}", commit=commit)
        remote = self.options.remote or self.project.get("repository_url")
        if remote:
            pushed = subprocess.run(
                ["git", "push", "--quiet", "--force", remote, f"HEAD:refs/heads/{self.branch}"],
                cwd=self.workspace,
                capture_output=True,
                text=True,
            )
            if pushed.returncode != 0:
                said = pushed.stderr.strip().splitlines()
                self.release(f"push refused: {said[-1] if said else pushed.returncode}")
                return EXIT_RELEASED
            self.steps("push", f"pushed {self.branch} to {remote}", remote=remote)
        self.attach_evidence(commit)
        usage = self.usage.pending()  # once: every retry sends the same body
        receipt = patiently(
            self.client.submit,
            self.attempt_id,
            summary or title,
            change={"commit": commit, "branch": self.branch},
            idempotency_key=f"factory-work-{self.attempt_id}-{commit}",
            usage=usage,
        )
        if usage:
            self.usage.sent(usage)
        self.steps(
            "submit",
            f"{self.key} submitted at {commit[:12]}: {receipt['state']}",
            state=receipt["state"],
            commit=commit,
        )
        return EXIT_SUBMITTED

    def attach_evidence(self, commit: str) -> None:
        diff = git(self.workspace, "diff", "--no-color", self.base, commit) + "\n"
        self._attach(diff.encode(), "diff", "change.diff")
        verify = self.project.get("verify") or {}
        if not verify:
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        output = b""
        for command in [*verify.get("setup", []), verify["test"]]:
            done = subprocess.run(
                ["sh", "-c", command],
                cwd=self.workspace,
                env=env,
                capture_output=True,
                timeout=verify.get("timeout_seconds", 600),
            )
            output += f"$ {command}\n".encode() + done.stdout + done.stderr
            output += f"[exit {done.returncode}]\n".encode()
            if done.returncode != 0 and command != verify["test"]:
                break
        self.steps(
            "verify",
            f"ran the project's verify command locally (exit {done.returncode})",
            exit_code=done.returncode,
        )
        self._attach(output, "log", "verify.log")
        tests = self.tests_criteria
        for kind, name, criteria in (
            ("junit", verify.get("junit"), tests),
            ("coverage", verify.get("coverage"), []),
        ):
            if not name:
                continue
            try:
                content = files.read_file(self.workspace, name)
            except files.UnsafePath as exc:
                self.steps("evidence", f"{kind} not attached: {exc}", kind=kind, refused=exc.path)
                continue
            if content is not None:
                self._attach(content, kind, Path(name).name, criteria)

    def _attach(self, content: bytes, kind: str, name: str, criteria=()) -> None:
        stored = patiently(
            lambda: self.client.evidence(
                self.attempt_id, io.BytesIO(content), kind, list(criteria), name
            )
        )
        self.steps(
            "evidence",
            f"attached {kind} {name} (evidence {stored['id']}, {stored['provenance']})",
            kind=kind,
            id=stored["id"],
        )

    def cleanup(self) -> None:
        git(self.options.repo, "worktree", "remove", "--force", str(self.workspace), check=False)


def work(client: FactoryClient, options: Options, steps: Steps) -> int:
    """The loop: returns the exit code (see the module docstring)."""
    check_clean(options.repo)
    done, last = 0, EXIT_SUBMITTED
    while options.max_tasks is None or done < options.max_tasks:
        claimed = patiently(client.claim, options.project, options.labels, options.lease)
        if claimed is None:
            if not options.loop:
                steps("idle", "nothing to claim")
                return last
            if done and options.max_tasks is None:
                steps("idle", f"nothing to claim; waiting {options.poll:g} s")
            time.sleep(options.poll)
            continue
        done += 1
        run = TaskRun(client, options, steps, claimed)
        steps(
            "claimed",
            f"claimed {run.key} ({run.task['title']}), attempt {run.attempt_id}",
            task=run.key,
            attempt=run.attempt_id,
        )
        last = _one(run)
        if not options.loop:
            return last
    return last


def _one(run: TaskRun) -> int:
    try:
        run.prepare()
        brief = run.write_brief()
        run.choose_resume()
        outcome = run.run_agent(brief)
        if outcome.code != EXIT_SUBMITTED:
            run.release(outcome.message)
            return outcome.code
        return run.conclude()
    except Interrupted as stop:
        run.release("interrupted")
        raise SystemExit(stop.code) from None
    except (Stop, files.UnsafePath) as stop:
        # A link where factory work writes or reads: refused, and the task released with the path.
        code = stop.code if isinstance(stop, Stop) else EXIT_RELEASED
        run.steps("stopped", str(stop), exit_code=code)
        if code != EXIT_LEASE_LOST:
            with contextlib.suppress(FactoryError):
                run.release(str(stop))
        return code
    finally:
        if hasattr(run, "workspace"):
            run.cleanup()


def _interrupt(signum, frame):
    raise Interrupted(EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED)


def main(client: FactoryClient, options: Options, steps: Steps) -> int:
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return work(client, options, steps)
    except Stop as stop:
        steps("stopped", str(stop), exit_code=stop.code)
        return stop.code
    except Interrupted as stop:
        steps("interrupted", "interrupted", exit_code=stop.code)
        return stop.code
    except SystemExit as exit_:
        steps("interrupted", "interrupted; the task was released", exit_code=exit_.code)
        return int(exit_.code)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def add_parser(sub) -> None:
    """The ``work`` subcommand of ``factory``."""
    p = sub.add_parser(
        "work",
        help="claim tasks and run a coding agent on each, from the brief to the submit",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--project", help="claim only in this project (its slug)")
    p.add_argument("--labels", default="", help="claim only tasks with these labels (a,b)")
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="the git repository (default: .)")
    p.add_argument(
        "--loop", action="store_true", help="keep claiming; wait when nothing is claimable"
    )
    p.add_argument("--max-tasks", type=int, help="stop after this many tasks")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between claims in --loop")
    p.add_argument("--lease", type=int, default=300, help="lease seconds (renewed every third)")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--timeout", type=float, help="stop the agent after this many seconds")
    p.add_argument("--remote", help="push here instead of the project's repository")
    p.add_argument("--no-stdin", action="store_true", help="do not give the brief on stdin")
    p.add_argument(
        "--agent",
        dest="preset",
        choices=sorted(presets.PRESETS),
        help="run this coding agent's CLI headless (see `factory agents`), instead of -- CMD",
    )
    p.add_argument(
        "--agent-args", default="", help='flags added to the preset\'s command ("-m MODEL")'
    )
    p.add_argument(
        "--resume-session",
        action="store_true",
        help="on a retry, resume the agent's own session of the task's last attempt here",
    )
    p.add_argument(
        "agent", nargs=argparse.REMAINDER, help="-- AGENT_CMD… ({brief}: the brief's path)"
    )
    p.set_defaults(run=command)


def command(client: FactoryClient, args) -> int:
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    preset = presets.PRESETS[args.preset] if args.preset else None
    if preset is not None and agent:
        print("factory work: give --agent NAME or -- CMD, not both", file=sys.stderr)
        return EXIT_USAGE
    if preset is None and (args.agent_args or args.resume_session):
        print("factory work: --agent-args and --resume-session go with --agent", file=sys.stderr)
        return EXIT_USAGE
    if preset is None and not agent:
        print("factory work: give --agent NAME or the agent's command after --", file=sys.stderr)
        return EXIT_USAGE
    repo = args.repo.resolve()
    executable = None
    if preset is not None:
        try:
            shlex.split(args.agent_args)
            # Before any claim: a missing agent must not take a task from the queue.
            executable = presets.require(preset, outside=[repo])
        except ValueError as exc:
            print(f"factory work: --agent-args: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except presets.MissingExecutable as exc:
            print(f"factory work: {exc}", file=sys.stderr)
            return EXIT_USAGE
    options = Options(
        command=agent,
        preset=preset,
        executable=executable,
        agent_args=args.agent_args,
        resume_session=args.resume_session,
        repo=repo,
        project=args.project,
        labels=[label for label in args.labels.split(",") if label],
        loop=args.loop,
        max_tasks=args.max_tasks,
        poll=args.poll,
        lease=args.lease,
        grace=args.grace,
        timeout=args.timeout,
        remote=args.remote,
        stdin=not args.no_stdin,
        json=args.json,
    )
    client.retries = max(client.retries, 6)  # a server restarting mid-task is waited for
    return main(client, options, Steps(args.json))
