"""Dependency caches of the setup step: one folder per project and lock-file key.

A project's verify block names its lock files (``cache_keys``, patterns relative to the
repository root). Before setup runs, ``key`` hashes the files of the checked-out commit
that match them; the hash picks the folder ``<cache root>/<project id>/<key>``, which
the sandbox sees at ``/cache``: read-write in the setup steps, read-only in the test
step. Nothing else of the cache root is inside the sandbox, so a project never sees
another project's cache, and the folder's name is built from a number and a hex digest,
so no setting or file of a repository can move it out of the root.

The key files are read without following links (a repository's ``uv.lock`` may be a link
to a file of the runner's machine) and only as regular files. ``use`` holds a shared
lock on the key's folder while a verification runs, drops the project's older keys past
``FACTORY_RUNNER_CACHE_KEEP`` (by last use) and, afterwards, the key's folder itself if
setup grew it past ``FACTORY_RUNNER_CACHE_MAX_MB``; a folder another verification is using
is never removed. Removal never follows a link (``mirror.remove``).
"""

import contextlib
import fcntl
import fnmatch
import hashlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from projects.verify import DEFAULT_CACHE_KEYS
from runner import mirror as git

logger = logging.getLogger(__name__)

CHUNK = 1024 * 1024


def root() -> Path:
    """The cache root: ``FACTORY_RUNNER_CACHE_ROOT``, or ``FACTORY_RUNNER_ROOT/cache``."""
    configured = settings.FACTORY_RUNNER_CACHE_ROOT
    return Path(configured) if configured else git.root() / "cache"


def patterns(block: dict) -> list[str]:
    """The block's lock-file patterns; blocks saved before the setting have the default."""
    return block.get("cache_keys", DEFAULT_CACHE_KEYS)


def key(block: dict, src: Path, *, scope: str) -> str:
    """The sha256 of the lock files of the checkout at ``src`` that ``block`` names, and of
    ``scope`` (submissions and the lander keep separate caches).

    Only regular files count, reached without following a link: a matching name that is a
    link, or lies behind one, is left out, so no file outside the checkout is ever read.
    """
    digest = hashlib.sha256(f"factory-cache 1 {scope}\n".encode())
    top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for pattern in patterns(block):
            folder, _, name = pattern.rpartition("/")
            digest.update(f"pattern {pattern}\n".encode())
            for found, content in _matching(top, folder, name):
                digest.update(f"file {found} {content}\n".encode())
    finally:
        os.close(top)
    return digest.hexdigest()


def _matching(top: int, folder: str, name: str) -> Iterator[tuple[str, str]]:
    """``(path, sha256)`` of each regular file in ``folder`` (no wildcards) whose name
    matches ``name``, in name order; nothing if the folder is missing or is a link."""
    fd = os.dup(top)
    try:
        for part in folder.split("/") if folder else []:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        return
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if fnmatch.fnmatchcase(e.name, name))
        for found in names:
            content = _hash_file(fd, found)
            if content is not None:
                yield (f"{folder}/{found}" if folder else found), content
    finally:
        os.close(fd)


def _hash_file(folder: int, name: str) -> str | None:
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None  # a link (ELOOP), or gone
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        digest = hashlib.sha256()
        while piece := os.read(handle, CHUNK):
            digest.update(piece)
        return digest.hexdigest()
    finally:
        os.close(handle)


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    # The sandbox's user only passes through, to the folder bound at /cache.
    path.chmod(0o711)
    return path


@contextlib.contextmanager
def use(project, cache_key: str, *, owner: int | None) -> Iterator[Path]:
    """The project's cache folder for ``cache_key``, made if new and given to ``owner``
    (the sandbox's user, when the worker is root); held (a shared lock) until the block
    ends. The project's other keys past the newest ``FACTORY_RUNNER_CACHE_KEEP`` are
    removed first; the folder itself afterwards if it is over ``FACTORY_RUNNER_CACHE_MAX_MB``.
    """
    project_folder = _folder(_folder(root()) / str(int(project.pk)))
    path = project_folder / cache_key
    with open(project_folder / f"{cache_key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        info = os.lstat(path) if os.path.lexists(path) else None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            path.unlink()  # only the runner writes here; never follow what is not a folder
            info = None
        if info is None:
            path.mkdir(mode=0o700)
            if owner is not None:
                os.chown(path, owner, owner)
        os.utime(path, follow_symlinks=False)  # its last use, for the eviction's order
        _evict(project_folder, keep=settings.FACTORY_RUNNER_CACHE_KEEP)
        try:
            yield path
        finally:
            limit = settings.FACTORY_RUNNER_CACHE_MAX_MB * 1024 * 1024
            if size(path) > limit and _exclusive(lock):
                logger.warning("cache %s is over %s bytes; dropped", path, limit)
                git.remove(path)


def _exclusive(lock) -> bool:
    """Whether the lock could be made exclusive at once (no other verification uses it)."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def size(path: Path) -> int:
    """Bytes that the folder ``path`` takes on disk: the blocks of every file, folder and
    link below it, without following a link. Setup writes what it likes here, so the
    walk is ``mirror.entries``: a tree of any depth or path length is counted whole."""
    return sum(info.st_blocks * 512 for _, _, info in git.entries(path))


def _evict(project_folder: Path, *, keep: int) -> list[str]:
    """Remove the project's keys past the newest ``keep`` (by last use) that no
    verification is using; the keys removed.

    Lock files stay (empty): removing one could give two runners two different locks
    for one key.
    """
    # Another runner's eviction may remove a key between the listing and its reading:
    # one gone meanwhile is passed over, never an error of this verification.
    used = {}
    for entry in project_folder.iterdir():
        if not entry.name.endswith(".lock"):
            with contextlib.suppress(FileNotFoundError):
                used[entry] = entry.lstat().st_mtime
    keys = sorted(used, key=used.get, reverse=True)
    removed = []
    for old in keys[max(keep, 1) :]:
        with open(project_folder / f"{old.name}.lock", "w") as lock:
            if not _exclusive(lock):
                continue  # in use: a later verification removes it
            try:
                folder = stat.S_ISDIR(old.lstat().st_mode)
            except FileNotFoundError:
                continue
            gone = git.remove(old) if folder else _unlink(old)
        if gone:
            removed.append(old.name)
    return removed


def _unlink(path: Path) -> bool:
    path.unlink(missing_ok=True)
    return True
