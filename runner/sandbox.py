"""The sandbox: the one place that runs a repository's commands, behind a small interface.

``Sandbox.run`` runs one shell command in a workspace and returns its ``Outcome``;
everything it printed goes to a log, cut at a limit. ``Bubblewrap`` is the backend:
Debian's ``bwrap`` with a read-only system, the workspace and a private /tmp the only
writable places, fresh user, PID, network, IPC and UTS namespaces (the network one has
only its own loopback: no network at all unless the caller allows it), a cleared
environment, and rlimits on memory, processes, file size and CPU time, all set by
``prlimit`` before the sandbox starts. When the worker is root the command runs as
``FACTORY_RUNNER_UID`` (``setpriv``), so the process limit binds. The PID namespace dies
with the sandbox's first process, so nothing it started outlives it: ``run`` returns only
once that process is dead. A container backend implements the same ``run``.
"""

import abc
import contextlib
import json
import math
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
# How long bwrap may take to reap a killed sandbox (a fork bomb's processes included).
KILL_WAIT = 10
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


# Where the sandbox sees a project's dependency cache (runner.cache), if it has one.
SANDBOX_CACHE = "/cache"


def cache_environment(*, writable: bool) -> dict[str, str]:
    """The variables that point package tools at the cache inside the sandbox.

    In the test step the cache is read-only, so Go's build cache (which ``go test`` must
    write) is the sandbox's private /tmp then.
    """
    return {
        "RUNNER_CACHE": SANDBOX_CACHE,
        "XDG_CACHE_HOME": f"{SANDBOX_CACHE}/xdg",
        "UV_CACHE_DIR": f"{SANDBOX_CACHE}/uv",
        "PIP_CACHE_DIR": f"{SANDBOX_CACHE}/pip",
        "npm_config_cache": f"{SANDBOX_CACHE}/npm",
        "GOMODCACHE": f"{SANDBOX_CACHE}/go/mod",
        "GOCACHE": f"{SANDBOX_CACHE}/go/build" if writable else "/tmp/go-build",
    }


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run on this machine (its message says what to install)."""


@dataclass(frozen=True)
class Limits:
    seconds: float
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
    limits: Limits | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.stopped

    def describe(self) -> str:
        # The limit itself, not what was measured: the last read may overshoot the limit.
        if self.stopped == "time":
            seconds = self.limits.seconds if self.limits else self.seconds
            return f"stopped after its time limit ({seconds:.0f} s)"
        if self.stopped == "output":
            limit = self.limits.output_bytes if self.limits else self.output_bytes
            return f"stopped: it printed more than its output limit ({limit} bytes)"
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
        cache: Path | None = None,
        cache_writable: bool = False,
    ) -> Outcome:
        """Run ``command`` with ``sh -c`` in ``workspace``; its output goes to ``log``.

        ``cache``, if given, is seen at ``/cache`` (writable only if ``cache_writable``)
        and named by the variables of ``cache_environment``."""


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

    def argv(
        self,
        command,
        *,
        workspace,
        network,
        limits,
        read_only=(),
        info_fd=None,
        cache=None,
        cache_writable=False,
    ) -> list[str]:
        memory = limits.memory_mb * 1024 * 1024
        argv = [
            "prlimit",
            f"--as={memory}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--cpu={math.ceil(limits.seconds) + 5}",
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
        if info_fd is not None:
            argv += ["--info-fd", str(info_fd)]
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
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        # After the private /tmp, which would otherwise hide a mirror that lives under /tmp.
        for path in [*read_only, *map(Path, settings.FACTORY_RUNNER_RO_BINDS)]:
            argv += ["--ro-bind", str(path), str(path)]
        environment = {}
        if cache is not None:
            # A read-only bind is a read-only mount: not even the folder's owner writes.
            argv += ["--bind" if cache_writable else "--ro-bind", str(cache), SANDBOX_CACHE]
            environment = cache_environment(writable=cache_writable)
        argv += [
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
        ]
        for name, value in environment.items():
            argv += ["--setenv", name, value]
        argv += ["--", "/bin/sh", "-c", command]
        return argv

    def run(
        self,
        command,
        *,
        workspace,
        network,
        limits,
        log,
        read_only=(),
        cache=None,
        cache_writable=False,
    ) -> Outcome:
        self.check()
        info, info_write = os.pipe()
        argv = self.argv(
            command,
            workspace=workspace,
            network=network,
            limits=limits,
            read_only=read_only,
            info_fd=info_write,
            cache=cache,
            cache_writable=cache_writable,
        )
        started = time.monotonic()
        deadline = started + limits.seconds
        # Nothing of the worker's environment (DATABASE_URL, SECRET_KEY, tokens) is passed
        # on; bwrap clears what is left. A session of its own lets us kill every process.
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={"PATH": SANDBOX_PATH},
                start_new_session=True,
                pass_fds=(info_write,),
            )
        except BaseException:
            os.close(info)
            raise
        finally:
            os.close(info_write)
        first = _first_process(info)
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
                _kill(process, first)
            exit_code = process.wait()
            _end(first)
            stream.close()
        return Outcome(
            exit_code=exit_code,
            seconds=time.monotonic() - started,
            stopped=stopped,
            output_bytes=written,
            limits=limits,
        )


def _first_process(info: int) -> int | None:
    """A pidfd for the sandbox's first process (its PID 1), which bwrap names on --info-fd.

    bwrap writes it once the sandbox is set up and then closes the pipe (or exits).
    """
    with os.fdopen(info, "rb") as stream:
        said = stream.read()
    try:
        return os.pidfd_open(json.loads(said)["child-pid"])
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _kill(process: subprocess.Popen, first: int | None) -> None:
    """Kill the sandbox's first process, which takes its PID namespace with it, and wait
    for bwrap to exit; if there is no first process yet, or bwrap does not exit, the
    process group goes."""
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(first, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=KILL_WAIT)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _end(first: int | None) -> None:
    """Return only once the sandbox's first process has died, and every process it
    started with it.

    bwrap exits as soon as the command does, while its PID 1 is still waiting on what
    the command left running (a daemon, a fork bomb's children); that PID 1 is killed
    here, and the kernel lets it finish dying only after the rest of its namespace.
    """
    if first is None:
        return
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(first, signal.SIGKILL)
    select.select([first], [], [], KILL_WAIT)
    os.close(first)
