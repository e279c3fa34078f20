"""The agent's process for ``factory work``: started in a session of its own, its output
copied to the log and, for a preset, read as it streams (``streams.StreamReader``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from factory_client import streams


class Agent:
    """The agent's process, in a session of its own so that it and its children can be
    stopped together (SIGTERM, then SIGKILL after the grace period)."""

    def __init__(self, argv, *, cwd: Path, env: dict, stdin_text: str | None, log, parser=None):
        self.log = log  # an open binary file, closed in finish
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if parser is not None else self.log,
            stderr=self.log if parser is not None else subprocess.STDOUT,
            start_new_session=True,
        )
        # A preset's output is read as it streams, for its usage (streams.StreamReader).
        self.reader = (
            streams.StreamReader(self.process.stdout, self.log, parser)
            if parser is not None
            else None
        )
        if stdin_text is not None:
            try:
                self.process.stdin.write(stdin_text.encode())
                self.process.stdin.close()
            except BrokenPipeError:
                pass

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self, grace: float) -> int:
        """SIGTERM the agent's group, then SIGKILL after ``grace`` seconds; its exit code."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                return self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return self.process.wait()

    def drained(self) -> None:
        """Wait until the reader has read all the agent printed (its last usage)."""
        if self.reader is not None:
            self.reader.join(timeout=30)

    def finish(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # anything it left running
        if self.reader is not None:
            self.reader.join(timeout=30)
            self.process.stdout.close()
        self.log.close()
