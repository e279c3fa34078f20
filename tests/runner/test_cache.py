"""The setup step's dependency cache, in the real sandbox: setup fills it from a package
index served on this machine's loopback, a second verification with the same lock file
takes everything from it without asking the index, the test step cannot write it, and a
project never sees another project's cache."""

import base64
import hashlib
import http.server
import os
import zipfile
from pathlib import Path

import pytest

from runner import cache, mirror
from runner.verify import verify
from tests.runner.conftest import SANDBOX_UID, project_for
from tests.runner.test_hostile import WRITE_JUNIT
from tests.serving import serve_in_thread

WHEEL = "tinydep-1.0-py3-none-any.whl"
# pip asks an index for its pages every time (max-age=0), so the recipe keeps a wheelhouse
# in the cache, chosen by requirements.txt, and installs from it (docs/runner.md).
SETUP = (
    'test -e "$RUNNER_CACHE/wheels/.complete" || {{ python3 -m pip download --quiet '
    "--disable-pip-version-check --only-binary :all: --index-url {index} "
    '--dest "$RUNNER_CACHE/wheels" -r requirements.txt && touch "$RUNNER_CACHE/wheels/.complete"; }}'
    " && python3 -m pip install --quiet --disable-pip-version-check --no-index "
    '--find-links "$RUNNER_CACHE/wheels" --target deps -r requirements.txt'
)
USES_TINYDEP = (
    """
import sys
sys.path.insert(0, "deps")
import tinydep
assert tinydep.VALUE == 42
try:
    with open("/cache/poison", "w") as poison:
        poison.write("later setups would read this")
    print("cache write: written")
except OSError as exc:
    print("cache write:", exc.strerror)
"""
    + WRITE_JUNIT
)


def build_wheel(folder: Path) -> Path:
    """A wheel of one module, ``tinydep`` (``VALUE = 42``), with its RECORD."""
    files = {
        "tinydep/__init__.py": b"VALUE = 42\n",
        "tinydep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    files["tinydep-1.0.dist-info/RECORD"] = (record + "tinydep-1.0.dist-info/RECORD,,\n").encode()
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A PEP 503 simple index of ``tinydep`` on 127.0.0.1; ``requests`` lists every path asked."""
    root = tmp_path_factory.mktemp("index")
    (root / "files").mkdir()
    build_wheel(root / "files")
    (root / "simple" / "tinydep").mkdir(parents=True)
    (root / "simple" / "tinydep" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{WHEEL}">{WHEEL}</a></body></html>'
    )
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/", requests
    server.shutdown()
    server.server_close()


def keys(runner_root: Path, project_id: int) -> list[str]:
    folder = runner_root / "cache" / str(project_id)
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def test_a_second_verification_takes_its_dependencies_from_the_cache_and_the_test_cannot_write_it(
    hostile, runner_root, index
):
    url, requests = index
    project, sha = hostile(
        {"requirements.txt": "tinydep==1.0\n", "test.py": USES_TINYDEP},
        setup=[SETUP.format(index=url)],
        setup_network=True,
        timeout_seconds=60,
    )
    requests.clear()

    first = verify(project=project, commit=sha)
    asked = list(requests)
    second = verify(project=project, commit=sha)

    assert (first.problems, second.problems) == ([], [])
    assert asked == ["/simple/tinydep/", f"/files/{WHEEL}"]
    assert requests == asked  # the second verification asked the index nothing
    [key] = keys(runner_root, 1)
    folder = runner_root / "cache" / "1" / key
    assert b"[runner] cache %s (new)\n" % key[:12].encode() in first.log
    assert b"[runner] cache %s (reused, " % key[:12].encode() in second.log
    assert b"cache write: Read-only file system" in second.log
    assert sorted(os.listdir(folder / "wheels")) == [".complete", WHEEL]
    assert not (folder / "poison").exists()
    assert folder.stat().st_uid == SANDBOX_UID


def test_a_project_sees_only_its_own_cache_and_a_new_lock_file_chooses_a_new_one(
    hostile, repository, runner_root
):
    project, sha = hostile(
        {"go.sum": "v1\n", "test.py": WRITE_JUNIT}, setup=["echo mine > /cache/secret"]
    )
    assert verify(project=project, commit=sha).problems == []
    [first] = keys(runner_root, 1)
    secret = runner_root / "cache" / "1" / first / "secret"
    other = project_for(
        repository.url,
        setup=[f"ls -A /cache; cat {secret}; ls /proc/1/root{runner_root}/cache; true"],
    )
    other.pk = 2
    changed = repository.commit({"go.sum": "v2\n"})

    seen = verify(project=other, commit=sha)
    assert verify(project=project, commit=changed).problems == []

    assert seen.problems == []
    assert b"(new)\n[runner] step 1 (setup): ls -A /cache; " in seen.log
    assert f"cat: {secret}: No such file or directory".encode() in seen.log
    assert f"/proc/1/root{runner_root}/cache': No such file".encode() in seen.log
    assert secret.read_text() == "mine\n"
    assert len(keys(runner_root, 1)) == 2
    assert first in keys(runner_root, 1)


def test_a_lock_file_that_is_a_link_is_not_read(tmp_path):
    block = project_for("file:///nowhere", setup=["true"]).verify
    outside = tmp_path / "outside"
    outside.write_text("the runner's own file\n")
    linked, empty = tmp_path / "linked", tmp_path / "empty"
    (linked / "deep").mkdir(parents=True)
    empty.mkdir()
    (linked / "uv.lock").symlink_to(outside)
    (linked / "requirements-dev.txt").symlink_to(outside)

    before = cache.key(block, linked, scope="submission")
    outside.write_text("changed\n")

    assert cache.key(block, linked, scope="submission") == before
    assert before == cache.key(block, empty, scope="submission")
    assert before != cache.key(block, empty, scope="landing")


def test_a_project_keeps_its_newest_keys_and_never_removes_one_in_use(runner_root, settings):
    project = project_for("file:///nowhere", setup=["true"])
    settings.FACTORY_RUNNER_CACHE_KEEP = 2
    for age, name in enumerate(["c" * 64, "b" * 64]):
        with cache.use(project, name, owner=None) as path:
            (path / "file").write_text(name)
        os.utime(path, (1000 - age, 1000 - age))

    with cache.use(project, "a" * 64, owner=None) as held:
        os.utime(held, (1, 1))  # the oldest now, but in use
        with cache.use(project, "d" * 64, owner=None):
            pass
        during = keys(runner_root, 1)
    with cache.use(project, "d" * 64, owner=None):
        pass

    assert during == ["a" * 64, "c" * 64, "d" * 64]
    assert keys(runner_root, 1) == ["c" * 64, "d" * 64]


def test_a_cache_grown_past_its_limit_is_dropped_after_the_verification(runner_root, settings):
    project = project_for("file:///nowhere", setup=["true"])
    settings.FACTORY_RUNNER_CACHE_MAX_MB = 1

    with cache.use(project, "e" * 64, owner=None) as path:
        (path / "big").write_bytes(b"x" * 2 * 1024 * 1024)

    assert keys(runner_root, 1) == []


@pytest.fixture
def buried(runner_root):
    """The runner root, removed after the test without recursion: pytest's own cleanup
    of old temporary folders (shutil.rmtree) raises RecursionError on a tree this deep,
    in whichever later run meets it."""
    yield runner_root
    assert mirror.remove(runner_root)


def bury(folder: Path, names: list[str], data: bytes) -> None:
    """A file of ``data`` at the end of a chain of folders ``names`` below ``folder``,
    made relative to each folder in turn, as a setup step can (no path is ever whole)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        handle = os.open("file", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(handle, data)
        os.close(handle)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "names",
    [["d"] * 1200, ["n" * 250] * 20],
    ids=["deeper than python's recursion", "past the longest path"],
)
def test_a_cache_that_hides_its_size_deep_down_is_still_dropped_past_its_limit(
    buried, settings, names
):
    project = project_for("file:///nowhere", setup=["true"])
    settings.FACTORY_RUNNER_CACHE_MAX_MB = 1

    with cache.use(project, "f" * 64, owner=None) as path:
        bury(path, names, b"x" * 2 * 1024 * 1024)

    assert keys(buried, 1) == []


BURY = (
    "import os\n"
    "os.chdir('/cache')\n"
    "for _ in range(1200):\n"
    "    os.makedirs('d', exist_ok=True)\n"
    "    os.chdir('d')\n"
    "open('left', 'w').write('for the next verification')\n"
)


def test_a_setup_that_buries_a_tree_in_the_cache_does_not_stop_the_next_verifications(
    hostile, buried
):
    project, sha = hostile(
        {"uv.lock": "v1\n", "bury.py": BURY, "test.py": WRITE_JUNIT},
        setup=["python3 bury.py"],
    )

    first = verify(project=project, commit=sha)
    second = verify(project=project, commit=sha)

    assert (first.problems, second.problems) == ([], [])
    [key] = keys(buried, 1)
    assert b"[runner] cache %s (reused, " % key[:12].encode() in second.log


def test_a_key_another_runner_removes_meanwhile_is_passed_over_when_evicting(
    runner_root, settings, monkeypatch
):
    project = project_for("file:///nowhere", setup=["true"])
    settings.FACTORY_RUNNER_CACHE_KEEP = 1
    with cache.use(project, "b" * 64, owner=None):
        pass
    folder = runner_root / "cache" / "1"
    listed = Path.iterdir
    # Another runner's eviction removed this key between the listing and its reading.
    monkeypatch.setattr(
        Path,
        "iterdir",
        lambda self: [*listed(self), self / ("c" * 64)] if self == folder else listed(self),
    )

    with cache.use(project, "a" * 64, owner=None) as path:
        assert path.is_dir()

    monkeypatch.undo()
    assert keys(runner_root, 1) == ["a" * 64]
