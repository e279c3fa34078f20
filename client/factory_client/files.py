"""Files the agent-side tools write and read in a repository, never through a link.

A repository can commit a symbolic link anywhere, ``.factory/brief.md ->
~/.ssh/authorized_keys`` included; a tool that opened such a path would overwrite the
file it leads to, or read it and send it to the server. Every function here walks
from a trusted directory (``root``, which the caller chose) one name at a time:
each directory is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the last, and
the file with ``O_NOFOLLOW``, so a link anywhere below ``root`` is refused rather than
followed, even one swapped in while the walk runs. Only a regular file with one
name (no hard link to elsewhere, no FIFO, no device) is read or written, and a file
is truncated only after that check. Where the platform has no ``O_NOFOLLOW`` or no
``dir_fd`` (Windows), each name is checked with ``lstat`` before it is used: links
and reparse points are still refused, though a link swapped in between the check and
the open is not.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not hang: it is refused after
BY_DESCRIPTOR = bool(
    _NOFOLLOW
    and hasattr(os, "O_DIRECTORY")
    and os.open in os.supports_dir_fd
    and os.mkdir in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
)


class UnsafePath(Exception):
    """A path below ``root`` is a link, or not the kind of file it must be; ``path`` is
    the part of it (relative to ``root``) that was refused."""

    def __init__(self, path: str, why: str):
        self.path, self.why = path, why
        super().__init__(self.naming(path))

    def naming(self, shown: str) -> str:
        """The refusal, naming the path as ``shown`` (as the caller was given it)."""
        return f"{shown} {self.why}" + ("; links are not followed" if "link" in self.why else "")


def _names(relative: str | PurePosixPath) -> tuple[str, ...]:
    names = PurePosixPath(relative).parts
    if not names or PurePosixPath(relative).is_absolute() or {"..", "."} & set(names):
        raise UnsafePath(str(relative), "is not a plain path inside the directory")
    return names


def _shown(names: tuple[str, ...], upto: int) -> str:
    return "/".join(names[: upto + 1])


def _is_link(st: os.stat_result) -> bool:
    reparse = getattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0)
    return stat.S_ISLNK(st.st_mode) or bool(getattr(st, "st_file_attributes", 0) & reparse)


def _why(st: os.stat_result | None, want: str) -> str:
    if st is not None and _is_link(st):
        return "is a link"
    return f"is not a {want}"


def _check_file(fd: int, shown: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(shown, "is not a regular file")
    if st.st_nlink != 1:
        raise UnsafePath(shown, "has another name (a hard link)")


# --- by descriptor (O_NOFOLLOW and dir_fd) ---------------------------------------------------


def _open_child_dir(parent: int, names: tuple[str, ...], i: int, create: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC
    try:
        return os.open(names[i], flags, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(names[i], 0o777, dir_fd=parent)
        return _open_child_dir(parent, names, i, create=False)
    except OSError:
        # ELOOP on Linux, EMLINK on FreeBSD, ENOTDIR: say which, from the name itself.
        try:
            st = os.stat(names[i], dir_fd=parent, follow_symlinks=False)
        except OSError:
            st = None
        raise UnsafePath(_shown(names, i), _why(st, "directory")) from None


@contextlib.contextmanager
def _parent_fd(root: Path, names: tuple[str, ...], create: bool) -> Iterator[int]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for i in range(len(names) - 1):
            inner = _open_child_dir(fd, names, i, create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _open_fd(root: Path, names: tuple[str, ...], write: bool) -> int:
    flags = (os.O_WRONLY | os.O_CREAT if write else os.O_RDONLY) | _NOFOLLOW
    with _parent_fd(root, names, create=write) as parent:
        try:
            fd = os.open(names[-1], flags | _NONBLOCK | _CLOEXEC, 0o666, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError:
            try:
                st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
            except OSError:
                st = None
            raise UnsafePath(_shown(names, len(names) - 1), _why(st, "regular file")) from None
    try:
        _check_file(fd, "/".join(names))
        os.set_blocking(fd, True)
        if write:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


# --- by name, checked with lstat (no O_NOFOLLOW) ---------------------------------------------


def _dirs_by_name(root: Path, names: tuple[str, ...], create: bool) -> Path:
    """``root`` joined with ``names``, each checked to be a directory and not a link."""
    path = root
    for i, name in enumerate(names):
        path = path / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            st = os.lstat(path)
        if _is_link(st) or not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(_shown(names, i), _why(st, "directory"))
    return path


def _file_by_name(root: Path, names: tuple[str, ...], create: bool) -> Path:
    path = _dirs_by_name(root, names[:-1], create) / names[-1]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise
        return path
    if _is_link(st) or not stat.S_ISREG(st.st_mode):
        raise UnsafePath("/".join(names), _why(st, "regular file"))
    if st.st_nlink != 1:
        raise UnsafePath("/".join(names), "has another name (a hard link)")
    return path


# --- what the tools call ---------------------------------------------------------------------


def open_write(root: Path, relative: str) -> BinaryIO:
    """``root/relative`` opened for writing from its start (created, with the directories
    on the way, when missing), or ``UnsafePath`` when any name below ``root`` is a link
    or the file is not a regular file with one name; nothing is truncated then."""
    names = _names(relative)
    if BY_DESCRIPTOR:
        return os.fdopen(_open_fd(Path(root), names, write=True), "wb")
    return open(_file_by_name(Path(root), names, create=True), "wb")


def write_file(root: Path, relative: str, data: bytes | str) -> None:
    """Write ``data`` to ``root/relative`` as ``open_write`` opens it."""
    with open_write(root, relative) as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


def open_read(root: Path, relative: str) -> BinaryIO:
    """``root/relative`` opened for reading; ``FileNotFoundError`` when it (or a directory
    on the way) does not exist; ``UnsafePath`` when any name below ``root`` is a link or
    the file is not a regular file with one name: nothing behind a link is read."""
    names = _names(relative)
    if BY_DESCRIPTOR:
        return os.fdopen(_open_fd(Path(root), names, write=False), "rb")
    return open(_file_by_name(Path(root), names, create=False), "rb")


def read_file(root: Path, relative: str) -> bytes | None:
    """The bytes of ``root/relative`` as ``open_read`` opens it; None when it is not there."""
    try:
        with open_read(root, relative) as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def make_dirs(root: Path, relative: str) -> Path:
    """Create the directories ``root/relative`` (those missing), refusing any link on
    the way with ``UnsafePath``; the path made."""
    names = _names(relative)
    if not BY_DESCRIPTOR:
        return _dirs_by_name(Path(root), names, create=True)
    with _parent_fd(Path(root), (*names, ""), create=True):
        pass  # the walk opens every name but the last, here an empty one
    return Path(root, *names)


def refuse_link(root: Path, relative: str) -> None:
    """``UnsafePath`` when any existing name of ``root/relative`` below ``root`` is a
    link (a missing name ends the check: nothing there to follow)."""
    path = Path(root)
    names = _names(relative)
    for i, name in enumerate(names):
        path = path / name
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        if _is_link(st):
            raise UnsafePath(_shown(names, i), "is a link")
