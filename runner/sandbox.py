"""The sandbox: the one place that runs a repository's commands, behind a small interface.

``Sandbox.run`` runs one shell command in a workspace and returns its ``Outcome``;
everything it printed goes to a log, cut at a limit. ``Bubblewrap`` is the backend:
Debian's ``bwrap`` with a read-only system, the workspace and a private /tmp the only
writable places, fresh user, PID, network, IPC and UTS namespaces (the network one has
only its own loopback: no network at all unless the caller allows it), a cleared
environment, and rlimits on memory, processes, file size and CPU time, all set by
``prlimit`` before the sandbox starts. When the worker is root the command runs as
``FACTORY_RUNNER_UID`` (``setpriv``), so the process limit binds. The PID namespace dies
with the sandbox's first process, so nothing it started outlives it. A container backend
implements the same ``run``.
"""

import abc
import contextlib
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.utils.module_loading import import_string

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# What of /etc a build needs (users, certificates, the resolver, the dynamic linker);
# the rest of /etc, where operators keep configuration, stays out of sight.
ETC = [
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "group",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "passwd",
    "protocols",
    "python3",
    "python3.11",
    "resolv.conf",
    "services",
    "ssl",
]


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run on this machine (its message says what to install)."""


@dataclass(frozen=True)
class Limits:
    seconds: int
    memory_mb: int
    output_bytes: int
    processes: int
    file_size_mb: int


@dataclass
class Outcome:
    """How a command ended: its exit code, how long it took, and what stopped it, if anything.

    ``stopped`` is "" when the command ended by itself, "time" when it ran past its
    time limit, and "output" when it printed more than its output limit.
    """

    exit_code: int | None
    seconds: float
    stopped: str = ""
    output_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.stopped

    def describe(self) -> str:
        if self.stopped == "time":
            return f"stopped after its time limit ({self.seconds:.0f} s)"
        if self.stopped == "output":
            return f"stopped: it printed more than its output limit ({self.output_bytes} bytes)"
        code = self.exit_code
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            return f"killed by signal {name}"
        if (
            code is not None
            and code > 128
            and code - 128 in (signal.SIGKILL, signal.SIGXFSZ, signal.SIGXCPU)
        ):
            return f"killed by signal {signal.Signals(code - 128).name} (a limit was reached)"
        return f"exited with {code}"


class Sandbox(abc.ABC):
    """Runs one command of a repository where it can harm nothing but its workspace."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise ``SandboxUnavailable`` if this sandbox cannot run here."""

    @abc.abstractmethod
    def run(
        self,
        command: str,
        *,
        workspace: Path,
        network: bool,
        limits: Limits,
        log: BinaryIO,
        read_only: tuple[Path, ...] = (),
    ) -> Outcome:
        """Run ``command`` with ``sh -c`` in ``workspace``; its output goes to ``log``."""


def sandbox() -> Sandbox:
    """The site's sandbox (``FACTORY_RUNNER_SANDBOX``, a dotted path)."""
    return import_string(settings.FACTORY_RUNNER_SANDBOX)()


class Bubblewrap(Sandbox):
    """Debian's bubblewrap (``apt-get install bubblewrap``); see the module's docstring."""

    def check(self) -> None:
        missing = [tool for tool in ("bwrap", "prlimit", "setpriv") if shutil.which(tool) is None]
        if missing:
            raise SandboxUnavailable(
                f"the runner needs {', '.join(missing)} on its machine "
                "(apt-get install bubblewrap util-linux)"
            )

    def argv(self, command, *, workspace, network, limits, read_only=()) -> list[str]:
        memory = limits.memory_mb * 1024 * 1024
        argv = [
            "prlimit",
            f"--as={memory}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--cpu={limits.seconds + 5}",
            "--core=0",
            "--nofile=4096",
            "--",
        ]
        if os.geteuid() == 0:
            uid = settings.FACTORY_RUNNER_UID
            argv += [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        argv += ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
        if network:
            argv.append("--share-net")
        argv += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "lib", "lib64", "lib32", "sbin"):
            path = Path("/") / top
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        for name in ETC:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for path in [*read_only, *map(Path, settings.FACTORY_RUNNER_RO_BINDS)]:
            argv += ["--ro-bind", str(path), str(path)]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--bind",
            str(workspace),
            "/workspace",
            "--chdir",
            "/workspace",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "CI",
            "1",
            "--",
            "/bin/sh",
            "-c",
            command,
        ]
        return argv

    def run(self, command, *, workspace, network, limits, log, read_only=()) -> Outcome:
        self.check()
        argv = self.argv(
            command, workspace=workspace, network=network, limits=limits, read_only=read_only
        )
        started = time.monotonic()
        deadline = started + limits.seconds
        # Nothing of the worker's environment (DATABASE_URL, SECRET_KEY, tokens) is passed
        # on; bwrap clears what is left. A session of its own lets us kill every process.
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={"PATH": SANDBOX_PATH},
            start_new_session=True,
        )
        written, stopped = 0, ""
        stream = process.stdout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = "time"
                    break
                ready, _, _ = select.select([stream], [], [], min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                room = limits.output_bytes - written
                log.write(chunk[:room])
                written += len(chunk)
                if written > limits.output_bytes:
                    stopped = "output"
                    break
        finally:
            if stopped or process.poll() is None:
                _kill(process)
            exit_code = process.wait()
            stream.close()
        return Outcome(
            exit_code=exit_code,
            seconds=time.monotonic() - started,
            stopped=stopped,
            output_bytes=written,
        )


def _kill(process: subprocess.Popen) -> None:
    """Kill the sandbox's process group; its PID namespace takes everything else with it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
