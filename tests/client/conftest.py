"""The project's repository for `factory work`'s end-to-end tests: a bare repository whose
main has the demo's failing test, a clone the agent works in, and the project set to it."""

import io
import os
import signal
import subprocess
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from unittest import mock

import pytest
from factory_client.cli import main

from demo.repository import VERIFY, build
from projects import services as project_services


@contextmanager
def alarm(seconds: float | None):
    """TimeoutError raised in the main thread after ``seconds`` (none if None)."""
    if seconds is None:
        yield
        return

    def expired(signum, frame):
        raise TimeoutError(f"factory did not end within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def factory_in_process(
    *args: str, env: dict[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``factory ARGS`` as its console script runs it, in this process: what it prints,
    and its exit code from ``main`` or from ``SystemExit`` (argparse's 2, ``--version``).

    A subprocess costs ~0.4 s of interpreter and imports a call; the entry point itself
    is still run as a process by test_cli's end-to-end journey, its no-token and no-Django
    tests, test_work's first journey and its Ctrl-C, and the completions (ADR 0015). ``env``
    is laid over ``os.environ`` for the call only, without DJANGO_SETTINGS_MODULE, as the
    process had it; COLUMNS is 80 as when the output is a pipe, so argparse wraps its help
    the same. ``timeout`` raises TimeoutError in the call (SIGALRM), as subprocess.run's did.
    """
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    environ = {**env, "COLUMNS": "80"}
    with (
        mock.patch.dict(os.environ, environ),
        mock.patch.object(sys, "argv", ["factory", *args]),
        redirect_stdout(out),
        redirect_stderr(err),
        alarm(timeout),
    ):
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
        if isinstance(code, str):  # as the interpreter does with sys.exit("message")
            print(code, file=sys.stderr)
            code = 1
    out.flush()
    err.flush()
    return subprocess.CompletedProcess(
        ["factory", *args],
        code or 0,
        out.buffer.getvalue().decode(),
        err.buffer.getvalue().decode(),
    )


def sh(cwd, *args):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def origin(tmp_path):
    """A bare repository whose main holds the demo's false claim (one test fails)."""
    demo = build(tmp_path / "demo")
    sh(tmp_path, "git", "init", "-q", "--bare", "origin.git")
    sh(demo.path, "git", "push", "-q", str(tmp_path / "origin.git"), "false-claim:main")
    return tmp_path / "origin.git"


@pytest.fixture
def clone(tmp_path, origin):
    sh(tmp_path, "git", "clone", "-q", str(origin), "clone")
    return tmp_path / "clone"


@pytest.fixture
def project(flow, origin):
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=f"file://{origin}",
        verify=VERIFY,
        gate_policy={"runner": {"required": True}, "tests-pass": {}, "diff-scope": {}},
    )
    return flow


@pytest.fixture
def upstream(tmp_path, origin):
    """A second clone that pushes to the project's repository after the agent cloned it."""
    sh(tmp_path, "git", "clone", "-q", "-b", "main", str(origin), "upstream")
    return tmp_path / "upstream"
