"""Hostile repositories against the runner: each a real git repository built in the test,
its hostile commit verified in the real sandbox (bubblewrap); afterwards nothing escaped,
nothing is left running and no workspace is left behind."""

import http.server
import logging
import os
import re
import socket
import stat
import time
from pathlib import Path

import pytest
from django.conf import settings

from runner import mirror
from runner.verify import CommitNotFound, CommitRefused, RunnerUnavailable, verify
from tests.evidence.test_memory import Peak
from tests.runner.conftest import SANDBOX_UID, commit_files, orphan_commit
from tests.serving import serve_in_thread

NO_JUNIT = "JUnit report: the test command wrote nothing at reports/junit.xml"
TIMED_OUT = "the test command stopped after its time limit (5 s)"
WRITE_JUNIT = """
import os
os.makedirs("reports", exist_ok=True)
with open("reports/junit.xml", "w") as report:
    report.write('<testsuite tests="1"><testcase classname="t" name="ok"/></testsuite>')
"""
PYTHON_FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""
# The shell itself then spins on builtins, so that only the time limit can end it.
SHELL_FORK_BOMB = ":(){ :|:& };:\nwhile true; do true; done\n"
MEMORY_BOMB = """
hoard = []
while True:
    hoard.append(bytearray(16 * 1024 * 1024))
"""
# Prints, for each path, what reading (or writing) it gave.
READ_EACH = """
import os, sys
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as source:
            print(path, source.read())
    except OSError as exc:
        print(path, repr(exc))
"""
WRITE_EACH = """
import os, sys
for path in sys.argv[1:]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as target:
            target.write("escaped")
        print(path, "written")
    except OSError as exc:
        print(path, repr(exc))
"""
CONNECT_EACH = """
import socket, sys
for address in sys.argv[1:]:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=3)
        print(address, "connected")
    except OSError as exc:
        print(address, repr(exc))
"""
# A classic double-forked daemon with its output closed, and a setsid one from the shell.
DAEMONS = (
    """
import os, subprocess, time
subprocess.Popen("setsid sh -c 'sleep 300' >/dev/null 2>&1 &", shell=True).wait()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        while True:
            with open("/workspace/daemon-alive", "a") as marker:
                marker.write("x")
            time.sleep(0.05)
    os._exit(0)
print("daemons started")
"""
    + WRITE_JUNIT
)


# Leaves, inside its workspace, a link to a folder outside it in a folder it made
# read-only, a 000 folder holding a file, and its workspace itself read-only.
TANGLE = (
    WRITE_JUNIT
    + """
import os, sys
os.makedirs("ro")
os.symlink(sys.argv[1], "ro/link")
os.chmod("ro", 0o555)
os.makedirs("locked/deep")
open("locked/deep/file", "w").close()
os.chmod("locked/deep", 0)
os.chmod("locked", 0)
os.chmod(".", 0o555)
"""
)


def sandbox_processes() -> list[str]:
    """Every live process of the sandbox's user on this machine, as ``pid state cmdline``
    (the tests run as root, so the sandbox runs as ``FACTORY_RUNNER_UID``).

    Zombies are left out: the sandbox's first process, once its bwrap has exited, stays
    one until the machine's init collects it; it runs nothing and holds nothing open.
    """
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == settings.FACTORY_RUNNER_UID:
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
                if state != "Z":
                    found.append(f"{entry.name} {state} {(entry / 'cmdline').read_bytes()!r}")
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def workspaces(runner_root: Path) -> list[Path]:
    folder = runner_root / "workspaces"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_python_fork_bomb_is_stopped_at_its_time_limit(hostile, runner_root):
    project, sha = hostile({"test.py": PYTHON_FORK_BOMB})

    started = time.monotonic()
    result = verify(project=project, commit=sha)

    assert time.monotonic() - started < 7
    assert result.problems == [TIMED_OUT, NO_JUNIT]
    assert result.steps[0]["stopped"] == "time"
    assert result.log.startswith(b"[runner] step 1 (test): python3 test.py\n\n[runner] step 1 ")
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_shell_fork_bomb_is_stopped_at_its_time_limit(hostile, runner_root):
    project, sha = hostile({"bomb.sh": SHELL_FORK_BOMB}, test="bash bomb.sh")

    started = time.monotonic()
    result = verify(project=project, commit=sha)

    assert time.monotonic() - started < 7
    assert result.problems == [TIMED_OUT, NO_JUNIT]
    assert b"fork: retry: Resource temporarily unavailable" in result.log
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_infinite_loop_is_stopped_after_its_time_limit(hostile, runner_root):
    project, sha = hostile({"test.py": "print('looping', flush=True)\nwhile True:\n    pass\n"})

    result = verify(project=project, commit=sha)

    assert result.problems == [TIMED_OUT, NO_JUNIT]
    assert result.steps[0]["outcome"] == "stopped after its time limit (5 s)"
    assert 5 <= result.steps[0]["seconds"] < 6
    assert result.log.startswith(b"[runner] step 1 (test): python3 test.py\nlooping\n\n")
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_memory_bomb_fails_with_memory_error(hostile, runner_root):
    project, sha = hostile({"test.py": MEMORY_BOMB})

    result = verify(project=project, commit=sha)

    assert result.problems == ["the test command exited with 1", NO_JUNIT]
    assert result.steps[0]["stopped"] == ""
    lines = result.log.splitlines()
    assert b"    hoard.append(bytearray(16 * 1024 * 1024))" in lines
    assert lines[-3:-1] == [b"MemoryError", b""]
    assert lines[-1].startswith(b"[runner] step 1 exited with 1 after ")
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_a_gibibyte_of_output_is_cut_at_the_output_limit(hostile, runner_root):
    project, sha = hostile({"run.sh": "head -c 1073741824 /dev/zero\n"}, test="sh run.sh")

    started = time.monotonic()
    result = verify(project=project, commit=sha)

    assert time.monotonic() - started < 5
    said = "stopped: it printed more than its output limit (65536 bytes)"
    assert result.problems == [f"the test command {said}; the log is cut there", NO_JUNIT]
    header, output = result.log.split(b"\n", 1)
    assert header == b"[runner] step 1 (test): sh run.sh"
    assert output[:65536] == b"\0" * 65536
    assert re.fullmatch(
        rf"\n\[runner\] step 1 {re.escape(said)} after \d+\.\d s\n".encode(), output[65536:]
    )
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_no_connection_leaves_the_sandbox(hostile, runner_root):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    test = f"python3 connect.py 127.0.0.1:{port} 1.1.1.1:80"
    project, sha = hostile({"connect.py": CONNECT_EACH}, test=test)

    started = time.monotonic()
    result = verify(project=project, commit=sha)

    assert time.monotonic() - started < 3
    assert result.problems == [NO_JUNIT]
    assert result.log.splitlines()[1:3] == [
        f"127.0.0.1:{port} ConnectionRefusedError(111, 'Connection refused')".encode(),
        b"1.1.1.1:80 OSError(101, 'Network is unreachable')",
    ]
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    assert workspaces(runner_root) == []


def test_the_sandbox_sees_no_secret_of_the_server(hostile, runner_root, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "secret-key-marker-7f3a")
    monkeypatch.setenv("DATABASE_URL", "postgres://factory:db-password-marker-91c@db/factory")
    upload = Path(settings.MEDIA_ROOT) / "evidence" / "upload.txt"
    upload.parent.mkdir(parents=True)
    upload.write_text("media-marker-5d2e")
    config = (Path(settings.BASE_DIR) / "factory_site" / "settings.py").resolve()
    test = f"python3 read.py /proc/1/environ /proc/self/environ {config} {upload}"
    project, sha = hostile({"read.py": READ_EACH}, test=test)

    result = verify(project=project, commit=sha)

    assert result.log.splitlines()[1:5] == [
        b"/proc/1/environ b'PATH=/usr/local/bin:/usr/bin:/bin\\x00'",
        b"/proc/self/environ b'CI=1\\x00HOME=/tmp\\x00TMPDIR=/tmp\\x00PATH=/usr/local/bin:/usr/bin:/bin"
        b"\\x00LANG=C.UTF-8\\x00PWD=/workspace\\x00'",
        f"{config} FileNotFoundError(2, 'No such file or directory')".encode(),
        f"{upload} FileNotFoundError(2, 'No such file or directory')".encode(),
    ]
    for secret in (b"secret-key-marker-7f3a", b"db-password-marker-91c", b"media-marker-5d2e"):
        assert secret not in result.log
    assert workspaces(runner_root) == []


SHOW_MOUNTS_AND_OBJECTS = """
import os, sys
print(open("/proc/self/mountinfo").read())
print("alternates", os.path.exists(".git/objects/info/alternates"))
pack = next(name for name in os.listdir(".git/objects/pack") if name.endswith(".pack"))
try:
    open(os.path.join(".git/objects/pack", pack), "r+b").write(b"X")
    print("pack written")
except OSError as exc:
    print("pack", type(exc).__name__)
"""


def test_the_sandbox_sees_neither_the_mirror_nor_where_it_lives(hostile, runner_root):
    project, sha = hostile({"show.py": SHOW_MOUNTS_AND_OBJECTS}, test="python3 show.py")
    mirror = runner_root / "mirrors" / "1.git"

    result = verify(project=project, commit=sha)

    log = result.log.decode()
    assert "mirrors" not in log
    assert "alternates False" in log
    assert "pack PermissionError" in log
    packs = list((mirror / "objects" / "pack").glob("*.pack"))
    assert [(p.stat().st_uid, p.stat().st_mode & 0o222) for p in packs] == [(0, 0)] * len(packs)
    assert workspaces(runner_root) == []


def test_writes_outside_the_workspace_do_not_reach_the_machine(hostile, runner_root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    name = f"escape-{tmp_path.name}"
    mirror = runner_root / "mirrors" / "1.git"
    targets = [
        f"/tmp/../{name}",
        f"/usr/{name}",
        f"/etc/{name}",
        f"{outside}/{name}",
        f"{mirror}/{name}",
    ]
    project, sha = hostile({"write.py": WRITE_EACH}, test=f"python3 write.py {' '.join(targets)}")

    result = verify(project=project, commit=sha)

    assert result.log.decode().splitlines()[1:6] == [
        f"/tmp/../{name} written",
        f"/usr/{name} OSError(30, 'Read-only file system')",
        f"/etc/{name} written",
        f"{outside}/{name} written",
        # The mirror is not in the sandbox at all: the write lands in its private /tmp.
        f"{mirror}/{name} written",
    ]
    assert [os.path.exists(os.path.normpath(path)) for path in targets] == [False] * 5
    assert list(outside.iterdir()) == []
    assert workspaces(runner_root) == []


def test_daemons_do_not_outlive_the_verification(hostile, runner_root):
    project, sha = hostile({"test.py": DAEMONS})

    started = time.monotonic()
    result = verify(project=project, commit=sha)

    assert time.monotonic() - started < 3
    assert result.problems == []
    assert result.steps[0]["outcome"] == "exited with 0"
    assert b"daemons started\n" in result.log
    assert sandbox_processes() == []
    assert workspaces(runner_root) == []


def test_a_report_linked_outside_the_repository_is_refused(hostile, runner_root, tmp_path):
    secret = tmp_path / "host-secret.xml"
    secret.write_text("<testsuite>host-secret-marker-3b8e</testsuite>")
    links = {"reports/junit.xml": str(secret), "shadow": "/etc/shadow"}
    project, sha = hostile(
        {"read.py": READ_EACH}, symlinks=links, test="python3 read.py shadow reports/junit.xml"
    )

    result = verify(project=project, commit=sha)

    assert result.problems == [
        "JUnit report: reports/junit.xml goes through a symbolic link; reports must be plain files"
    ]
    assert result.junit is None
    assert result.log.splitlines()[1:3] == [
        b"shadow FileNotFoundError(2, 'No such file or directory')",
        b"reports/junit.xml FileNotFoundError(2, 'No such file or directory')",
    ]
    assert b"host-secret-marker-3b8e" not in result.log + result.diff
    assert (secret.stat().st_uid, secret.read_text()) == (
        0,
        "<testsuite>host-secret-marker-3b8e</testsuite>",
    )
    assert workspaces(runner_root) == []


def test_an_unknown_commit_is_the_commits_fault_naming_it(hostile, runner_root):
    project, _ = hostile({"test.py": WRITE_JUNIT})
    unknown = "0123456789abcdef0123456789abcdef01234567"

    with pytest.raises(CommitNotFound) as raised:
        verify(project=project, commit=unknown)

    assert str(raised.value) == (
        f"commit {unknown} is not in the repository (fetched just now); was it pushed?"
    )
    assert workspaces(runner_root) == []


def test_an_unreachable_repository_is_unavailable_with_gits_message(hostile, runner_root, tmp_path):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    project.repository_url = f"file://{tmp_path}/nonexistent"

    with pytest.raises(RunnerUnavailable) as raised:
        verify(project=project, commit=sha)

    assert str(raised.value) == (
        f"git clone: fatal: '{tmp_path}/nonexistent' does not appear to be a git repository\n"
        "fatal: Could not read from remote repository.\n\n"
        "Please make sure you have the correct access rights\n"
        "and the repository exists."
    )
    assert not (runner_root / "mirrors" / "1.git").exists()
    assert workspaces(runner_root) == []


def test_a_second_verification_fetches_into_the_same_mirror(hostile, repository, runner_root):
    project, first = hostile({"test.py": WRITE_JUNIT})
    cloned = verify(project=project, commit=first)
    mirror = (runner_root / "mirrors" / "1.git").stat().st_ino

    second = repository.commit({"later.txt": "pushed after the first verification\n"})
    fetched = verify(project=project, commit=second)

    assert (cloned.mirror, cloned.commit, cloned.problems) == ("cloned", first, [])
    assert (fetched.mirror, fetched.commit, fetched.problems) == ("fetched", second, [])
    assert (runner_root / "mirrors" / "1.git").stat().st_ino == mirror
    assert workspaces(runner_root) == []


def test_a_one_second_budget_still_runs_the_test(hostile, runner_root):
    project, sha = hostile({"test.py": WRITE_JUNIT}, timeout_seconds=1)

    result = verify(project=project, commit=sha)

    assert result.problems == []
    assert result.steps[0]["outcome"] == "exited with 0"
    assert workspaces(runner_root) == []


def test_the_test_command_can_use_git_in_its_workspace(hostile, runner_root):
    project, sha = hostile(
        {"test.py": WRITE_JUNIT}, test="git log -1 --format='%H %s' && python3 test.py"
    )

    result = verify(project=project, commit=sha)

    assert result.problems == []
    assert result.log.splitlines()[1] == f"{sha} hostile".encode()
    assert workspaces(runner_root) == []


def test_a_report_committed_in_the_repository_never_stands_in_for_the_tests(hostile):
    passing = '<testsuite tests="1"><testcase classname="t" name="test_ok"/></testsuite>'
    project, commit = hostile({"reports/junit.xml": passing, "test.py": "print('no tests run')\n"})

    result = verify(project=project, commit=commit)

    assert result.junit is None
    assert result.problems == ["JUnit report: the test command wrote nothing at reports/junit.xml"]


@pytest.mark.parametrize("through", ["/proc/self/root", "/proc/self/cwd/proc/self/root"])
def test_a_repository_through_proc_is_not_fetched(hostile, runner_root, repository, through):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    project.repository_url = f"file://{through}{repository.path}"

    with pytest.raises(RunnerUnavailable) as raised:
        verify(project=project, commit=sha)

    assert str(raised.value) == (
        f"{project.repository_url} leads into /proc, /sys or /dev; a local repository may not"
    )
    assert list((runner_root / "mirrors").glob("*.git")) == []


def test_a_name_that_now_resolves_to_the_loopback_is_not_fetched(
    hostile, runner_root, settings, monkeypatch
):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    project.repository_url = "http://git.example.org/repo.git"
    settings.FACTORY_REPOSITORY_ALLOW_PRIVATE = False
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, port, *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))
        ],
    )

    with pytest.raises(RunnerUnavailable) as raised:
        verify(project=project, commit=sha)

    assert str(raised.value) == (
        "http://git.example.org/repo.git may not be fetched: "
        "git.example.org resolves to 127.0.0.1, an address inside the network; "
        "repositories are reached at public addresses only"
    )
    assert list((runner_root / "mirrors").glob("*.git")) == []


def test_a_repository_that_redirects_is_not_followed(hostile, runner_root):
    asked = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/elsewhere")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    serve_in_thread(server)
    project, sha = hostile({"test.py": WRITE_JUNIT})
    project.repository_url = f"http://127.0.0.1:{server.server_port}/repo.git"
    try:
        with pytest.raises(RunnerUnavailable):
            verify(project=project, commit=sha)
    finally:
        server.shutdown()

    assert [path.split("?")[0] for path in asked] == ["/repo.git/info/refs"]


def test_an_orphan_commit_is_refused_naming_it(hostile, repository, runner_root):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    orphan = orphan_commit(repository.path, sha)

    with pytest.raises(CommitRefused) as raised:
        verify(project=project, commit=orphan)

    assert str(raised.value) == (
        f"commit {orphan[:12]} shares no history with the default branch 'main' "
        "(no merge base): base the change on the default branch"
    )
    assert workspaces(runner_root) == []


def test_a_300_character_file_name_is_refused_naming_it(hostile, repository, runner_root):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    long = commit_files(repository.path, sha, {"a" * 300: b"x\n"})

    with pytest.raises(CommitRefused) as raised:
        verify(project=project, commit=long)

    assert str(raised.value) == (
        f"the commit's tree has a file name of 300 bytes ({'a' * 60}…), "
        "longer than the 255 this file system allows"
    )
    assert workspaces(runner_root) == []


def test_a_path_git_will_not_check_out_is_refused_naming_it(hostile, repository, runner_root):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    sneaky = commit_files(repository.path, sha, {"sub/.git/config": b"[core]\n"})

    with pytest.raises(CommitRefused) as raised:
        verify(project=project, commit=sneaky)

    assert str(raised.value) == (
        f"commit {sneaky[:12]} cannot be checked out: "
        "git checkout: error: invalid path 'sub/.git/config'"
    )
    assert workspaces(runner_root) == []


def test_a_tree_1200_folders_deep_is_checked_out_and_verified(hostile, repository, runner_root):
    # The checkout is given to the sandbox's user folder by folder; os.walk raised
    # RecursionError on a tree this deep, a crash where a verdict was due.
    project, sha = hostile({"test.py": WRITE_JUNIT})
    deep = commit_files(repository.path, sha, {"d/" * 1200 + "leaf.txt": b"x\n"})

    result = verify(project=project, commit=deep)

    assert result.problems == []
    assert result.passed
    assert workspaces(runner_root) == []


def test_a_tree_over_the_checkout_limit_is_refused_before_checkout(
    hostile, repository, runner_root, settings
):
    settings.FACTORY_RUNNER_MAX_CHECKOUT_BYTES = 1_000_000
    project, sha = hostile({"test.py": WRITE_JUNIT})
    big = commit_files(repository.path, sha, {"big.txt": 2_000_000})

    with pytest.raises(CommitRefused) as raised:
        verify(project=project, commit=big)

    assert str(raised.value) == (
        "the commit's tree is 2.0 MB, over the limit of 1.0 MB (FACTORY_RUNNER_MAX_CHECKOUT_BYTES)"
    )
    assert workspaces(runner_root) == []


def test_a_diff_past_the_report_limit_fails_even_when_cut_between_files(
    hostile, repository, runner_root, settings
):
    project, sha = hostile({"test.py": WRITE_JUNIT})
    first = commit_files(repository.path, sha, {"a.txt": b"a\n"}, branch="first")
    one_file = mirror.git("diff", "--full-index", sha, first, cwd=repository.path)
    settings.FACTORY_RUNNER_REPORT_MAX_BYTES = len(one_file)
    both = commit_files(repository.path, first, {"outside/b.txt": b"b\n"}, branch="both")

    result = verify(project=project, commit=both)

    assert result.problems == [
        f"the diff from the merge base is over {len(one_file)} bytes "
        "(FACTORY_RUNNER_REPORT_MAX_BYTES); it is cut there, so the files past the cut "
        "cannot be checked"
    ]
    assert result.diff == one_file.encode()
    assert workspaces(runner_root) == []


def test_a_500_mb_file_is_verified_in_bounded_memory_and_its_diff_cut(
    hostile, repository, runner_root, settings
):
    # The runner keeps its diff up to this limit by design; the rest must stay in git.
    settings.FACTORY_RUNNER_REPORT_MAX_BYTES = 4 * 1024 * 1024
    project, sha = hostile({"test.py": WRITE_JUNIT})
    big = commit_files(repository.path, sha, {"big.txt": 500_000_000})
    project.repository_url = str(repository.path)  # a local clone: no second pack to index
    peak = Peak()
    peak.start()

    result = verify(project=project, commit=big)

    assert peak.growth_mib() < 64
    assert result.problems == [
        f"the diff from the merge base is over {4 * 1024 * 1024} bytes "
        "(FACTORY_RUNNER_REPORT_MAX_BYTES); it is cut there, so the files past the cut "
        "cannot be checked"
    ]
    assert len(result.diff) == 4 * 1024 * 1024
    assert result.diff.startswith(b"diff --git a/big.txt b/big.txt\nnew file mode 100644\n")
    assert (result.steps[0]["outcome"], result.junit is not None) == ("exited with 0", True)
    assert workspaces(runner_root) == []


def test_links_and_000_folders_in_the_workspace_are_removed_without_following_links(
    hostile, runner_root, tmp_path
):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "kept.txt").write_text("kept")
    project, sha = hostile({"test.py": TANGLE}, test=f"python3 test.py {outside}")

    result = verify(project=project, commit=sha)

    assert (result.problems, result.steps[0]["outcome"]) == ([], "exited with 0")
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert [p.name for p in outside.iterdir()] == ["kept.txt"]
    assert workspaces(runner_root) == []


def remove_as(uid: int, workspace: Path) -> int:
    """``mirror.remove(workspace)`` in a child process running as ``uid`` (a worker that is
    not root); its exit code: 0 removed, 1 not removed, 2 it raised."""
    child = os.fork()
    if child == 0:
        code = 2
        try:
            os.setgid(uid)
            os.setuid(uid)
            code = 0 if mirror.remove(workspace) else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])


def test_a_worker_that_is_not_root_removes_links_and_000_folders_and_nothing_outside(
    runner_root, tmp_path
):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    workspace = runner_root / "workspaces" / "1-tangle"
    (workspace / "src" / "ro").mkdir(parents=True)
    (workspace / "src" / "locked" / "deep").mkdir(parents=True)
    (workspace / "src" / "locked" / "deep" / "file").write_text("x")
    (workspace / "src" / "ro" / "link").symlink_to(outside)
    # The worker's own folders: it is the user the sandbox ran as.
    for path in [workspace.parent, workspace, *workspace.rglob("*"), outside]:
        os.lchown(path, SANDBOX_UID, SANDBOX_UID)
    for folder, mode in (("src/ro", 0o555), ("src/locked/deep", 0), ("src/locked", 0)):
        (workspace / folder).chmod(mode)

    code = remove_as(SANDBOX_UID, workspace)

    assert (code, workspace.exists()) == (0, False)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755


def test_a_workspace_that_cannot_be_removed_never_decides_the_verdict(
    hostile, runner_root, monkeypatch, caplog
):
    project, sha = hostile({"test.py": WRITE_JUNIT})

    def refuse(fd):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(mirror, "_empty", refuse)
    with caplog.at_level(logging.WARNING, logger="runner.mirror"):
        result = verify(project=project, commit=sha)
    (left,) = workspaces(runner_root)
    monkeypatch.undo()

    assert (result.problems, result.commit) == ([], sha)
    assert caplog.messages == [
        f"workspace {left} could not be removed (swept later): [Errno 1] Operation not permitted"
    ]
    assert (mirror.sweep(older_than=-10), workspaces(runner_root)) == (1, [])
