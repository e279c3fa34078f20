"""Reading an upload to import: a zip or tar of a folder, or one file, into ``{path: bytes}``.

Guarantees: nothing is written to disk; no entry may name a path outside the folder (``..``,
absolute paths, drive letters), be a link or a device; the upload, the bytes it expands to
(counted while decompressing, never taken from the archive's own headers, which a zip bomb
fakes) and the number of files are bounded by settings. Any refusal is an ``ArchiveError``
with a stable code and the entry's name.
"""

import io
import tarfile
import zipfile
from pathlib import PurePosixPath

from django.conf import settings

PLAIN = (".jsonl", ".json", ".md", ".markdown", ".yaml", ".yml", ".txt")
ARCHIVES = (".zip", ".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".gz")
CHUNK = 64 * 1024


class ArchiveError(ValueError):
    """Why an upload cannot be read: ``code`` (stable) and a message naming the entry."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def read_upload(name: str, data: bytes, *, max_bytes=None, max_expanded=None, max_files=None):
    """The files of the upload ``data`` (called ``name``), by POSIX path, sorted."""
    max_bytes = max_bytes or settings.FACTORY_IMPORT_MAX_BYTES
    limits = _Limits(
        max_expanded or settings.FACTORY_IMPORT_MAX_EXPANDED_BYTES,
        max_files or settings.FACTORY_IMPORT_MAX_FILES,
    )
    if len(data) > max_bytes:
        raise ArchiveError(
            "too_large", f"the upload is {len(data)} bytes; the limit is {max_bytes}"
        )
    if zipfile.is_zipfile(io.BytesIO(data)):
        files = _read_zip(data, limits)
    elif _is_tar(data):
        files = _read_tar(data, limits)
    elif name.lower().endswith(ARCHIVES):
        raise ArchiveError("bad_archive", f"{name}: not a readable zip or tar archive")
    elif name.lower().endswith(PLAIN):
        limits.count(name, len(data))
        files = {PurePosixPath(name.replace("\\", "/")).name: data}
    else:
        raise ArchiveError(
            "unsupported_upload",
            f"{name}: not a zip or tar archive, nor a .jsonl, .json, .md or .yaml file",
        )
    return dict(sorted(files.items()))


class _Limits:
    def __init__(self, max_expanded: int, max_files: int):
        self.max_expanded, self.max_files = max_expanded, max_files
        self.expanded, self.files = 0, 0

    def count(self, entry: str, size: int) -> None:
        self.expanded += size
        if self.expanded > self.max_expanded:
            raise ArchiveError(
                "too_large_expanded",
                f"{entry}: the archive expands past {self.max_expanded} bytes",
            )

    def one_more(self, entry: str) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise ArchiveError("too_many_files", f"{entry}: more than {self.max_files} files")


def _is_tar(data: bytes) -> bool:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*"):
            return True
    except (tarfile.TarError, EOFError, OSError):
        return False


def _clean_path(entry: str) -> str | None:
    """The entry's path inside the folder; None for noise; ArchiveError if it leaves it."""
    if "\x00" in entry:
        raise ArchiveError("unsafe_path", f"{entry!r}: a NUL in the name")
    posix = entry.replace("\\", "/")
    if posix.startswith("/") or (len(posix) > 1 and posix[1] == ":"):
        raise ArchiveError("unsafe_path", f"{entry}: an absolute path")
    parts = [part for part in posix.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError("unsafe_path", f"{entry}: a path that leaves the folder (..)")
    if not parts or parts[0] in ("__MACOSX", ".git") or parts[-1] == ".DS_Store":
        return None
    if parts[-1].startswith("._"):
        return None  # AppleDouble metadata beside each file of a macOS zip
    return "/".join(parts)


def _add(files: dict, path: str, data: bytes) -> None:
    if path in files:
        raise ArchiveError("duplicate_path", f"{path}: twice in the archive")
    files[path] = data


def _read_zip(data: bytes, limits: _Limits) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                mode = info.external_attr >> 16
                if mode and (mode & 0o170000) == 0o120000:
                    raise ArchiveError("link_in_archive", f"{info.filename}: a symbolic link")
                path = _clean_path(info.filename)
                if path is None:
                    continue
                limits.one_more(path)
                with archive.open(info) as member:
                    _add(files, path, _read_counted(member, path, limits))
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
        raise ArchiveError("bad_archive", f"not a readable zip: {exc}") from exc
    return files


def _read_tar(data: bytes, limits: _Limits) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive:
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise ArchiveError("link_in_archive", f"{member.name}: a link")
                if not member.isfile():
                    raise ArchiveError("special_file", f"{member.name}: not a regular file")
                path = _clean_path(member.name)
                if path is None:
                    continue
                limits.one_more(path)
                handle = archive.extractfile(member)
                _add(files, path, _read_counted(handle, path, limits))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError("bad_archive", f"not a readable tar: {exc}") from exc
    return files


def _read_counted(handle, path: str, limits: _Limits) -> bytes:
    """Read a member in chunks, stopping as soon as the archive's total passes the limit."""
    chunks = []
    while chunk := handle.read(CHUNK):
        limits.count(path, len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)
