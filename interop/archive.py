"""Reading an upload to import: a zip or tar of a folder, or one file, into ``{path: bytes}``.

What ``read_upload`` guarantees:

- Nothing is written to disk: every entry is read into memory, by its POSIX path relative to
  the archive's root (``./a/b`` is ``a/b``), and the result is sorted by path. A folder zipped
  as itself keeps its top folder (``myrepo/docs/...``): the format readers match by suffix.
- No path leaves the folder: an absolute name (``/x``, ``C:\\x``, ``\\\\server``), a ``..``
  part, a NUL or a name that is not UTF-8 is refused (``unsafe_path``); so are links
  (``link_in_archive``), devices and FIFOs (``special_file``) and the same path twice
  (``duplicate_path``). Directories are skipped, and so is noise: ``__MACOSX/``, ``.git/``,
  ``.DS_Store`` and ``._*`` AppleDouble files.
- The upload (``too_large``), what it expands to (``too_large_expanded``) and its number of
  files (``too_many_files``) are bounded. A zip's central directory is counted first, from
  its end record (zip64 too) and then entry by entry without building anything, and may
  list at most ``ENTRIES_PER_FILE`` times the file limit (folders and macOS's ``._`` files
  are entries too): ``zipfile`` builds an object for every entry before any is read. The expansion is counted in chunks as it is
  decompressed, never taken from a header (a zip bomb's headers lie), and reading stops as
  soon as it passes the limit. A tar counts its whole decompressed stream, headers included,
  so a million empty entries is a bomb too. Zip entries are read only when stored or
  deflated: Python's bzip2 and LZMA zip readers decompress a whole compressed chunk at once,
  which a 400-byte zip turns into gigabytes before anything can count them.
- Every refusal is an ``ArchiveError`` with a stable ``code`` and a message naming the entry
  (or the upload); a corrupt archive is ``bad_archive`` with the library's reason.
"""

import bz2
import gzip
import io
import lzma
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import PurePosixPath
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

CHUNK = 64 * 1024
PLAIN = (".jsonl", ".json", ".md", ".markdown", ".yaml", ".yml", ".txt")
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a first entry, or the end record of an empty zip
# A compressed stream is taken for a compressed tar; the magic is specific enough that no
# text file starts with it (bzip2's is followed by its block or end-of-stream marker).
COMPRESSED = (
    (re.compile(rb"\x1f\x8b\x08"), "gz"),
    (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bz2"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz"),
)
TAR_NAMES = (
    (".tar", None),
    (".tgz", "gz"),
    (".gz", "gz"),
    (".tbz2", "bz2"),
    (".bz2", "bz2"),
    (".txz", "xz"),
    (".xz", "xz"),
)
# The kinds of upload an import takes, by the media type a multipart part declares, with
# the name suffix that says the same: a part called "file" sent as application/x-ndjson is
# read as file.jsonl (``upload_name``). The API's schema lists them.
UPLOAD_MEDIA_TYPES = {
    "application/zip": ".zip",
    "application/x-tar": ".tar",
    "application/gzip": ".tar.gz",
    "application/x-bzip2": ".tar.bz2",
    "application/x-xz": ".tar.xz",
    "application/x-ndjson": ".jsonl",
    "application/json": ".json",
    "text/markdown": ".md",
    "application/yaml": ".yaml",
    "text/plain": ".txt",
}


def upload_name(name: str, media_type: str) -> str:
    """``name``, or when it says no kind of upload, ``name`` with the suffix of the kind
    its declared ``media_type`` names (parameters such as ``; charset=`` ignored)."""
    lower = name.lower()
    known = (".zip", *PLAIN, *(suffix for suffix, _ in TAR_NAMES))
    suffix = UPLOAD_MEDIA_TYPES.get(media_type.partition(";")[0].strip().lower())
    return name if lower.endswith(known) or suffix is None else name + suffix


READ_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
ENTRIES_PER_FILE = 4
# The zip records the central directory is found by (APPNOTE 4.3.12-4.3.16).
END = struct.Struct("<4s4H2LH")
END_SIGNATURE = b"PK\x05\x06"
END64 = struct.Struct("<4sQ2H2L4Q")
END64_SIGNATURE = b"PK\x06\x06"
LOCATOR64 = struct.Struct("<4sLQL")
LOCATOR64_SIGNATURE = b"PK\x06\x07"
CENTRAL = struct.Struct("<4s4B4HL2L5HLL")
CENTRAL_SIGNATURE = b"PK\x01\x02"
ZIP_METHOD_NAMES = {9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstandard", 99: "AES"}
DRIVE = re.compile(r"[A-Za-z]:")  # C:\x, and C:x, which Windows reads against drive C's folder
# What the zip, tar and decompression libraries raise for a corrupt archive. ArchiveError is
# a ValueError too, so _reading lets it through before catching these.
LIBRARY_ERRORS = (
    zipfile.BadZipFile,
    tarfile.TarError,
    EOFError,
    OSError,
    ValueError,
    struct.error,
    zlib.error,
    lzma.LZMAError,
    NotImplementedError,
    RuntimeError,
)


class ArchiveError(ValueError):
    """Why an upload cannot be read: ``code`` (stable, snake_case) and a message naming the entry."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def read_upload(
    name: str,
    data: bytes | bytearray | memoryview | Readable,
    *,
    max_bytes: int | None = None,
    max_expanded: int | None = None,
    max_files: int | None = None,
) -> dict[str, bytes]:
    """The files of the upload ``data`` (called ``name``), by POSIX path, sorted by path.

    ``data`` is the upload's bytes or a file to read them from (from its start, if it can
    seek). The limits default to the settings ``FACTORY_IMPORT_MAX_BYTES`` (20 MiB),
    ``FACTORY_IMPORT_MAX_EXPANDED_BYTES`` (100 MiB) and ``FACTORY_IMPORT_MAX_FILES`` (20,000).
    """
    name = name or ""
    if max_bytes is None:
        max_bytes = _setting("FACTORY_IMPORT_MAX_BYTES", 20 * 1024 * 1024)
    limits = _Limits(
        _setting("FACTORY_IMPORT_MAX_EXPANDED_BYTES", 100 * 1024 * 1024)
        if max_expanded is None
        else max_expanded,
        _setting("FACTORY_IMPORT_MAX_FILES", 20_000) if max_files is None else max_files,
    )
    raw = _upload_bytes(data, max_bytes)
    kind, compression = _kind(name, raw)
    if kind == "zip":
        files = _read_zip(name, raw, limits)
    elif kind == "tar":
        files = _read_tar(name, raw, compression, limits)
    else:
        files = _read_plain(name, raw, limits)
    return dict(sorted(files.items()))


def _setting(name: str, default: int) -> int:
    try:
        return int(getattr(settings, name, default))
    except ImproperlyConfigured:  # read outside a configured Django: a script, a REPL
        return default


class _Limits:
    """What the archive has expanded to and how many files it has, against the limits."""

    def __init__(self, max_expanded: int, max_files: int):
        self.max_expanded, self.max_files = max_expanded, max_files
        self.expanded, self.files = 0, 0

    def spend(self, entry: str, size: int) -> None:
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


def _upload_bytes(data: bytes | bytearray | memoryview | Readable, max_bytes: int) -> bytes:
    """The upload's bytes, reading no more than one byte past the limit from a file."""
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > max_bytes:
            raise ArchiveError(
                "too_large", f"the upload is {len(raw)} bytes; the limit is {max_bytes}"
            )
        return raw
    with suppress(AttributeError, OSError):  # a stream that cannot seek is read as it is
        data.seek(0)  # type: ignore[attr-defined]  # an upload is the whole file
    chunks, size = [], 0
    while size <= max_bytes and (chunk := data.read(min(CHUNK, max_bytes + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise ArchiveError(
            "too_large", f"the upload is more than {max_bytes} bytes; the limit is {max_bytes}"
        )
    return b"".join(chunks)


def _kind(name: str, raw: bytes) -> tuple[str, str | None]:
    """``("zip", None)``, ``("tar", compression)`` or ``("plain", None)``: by content first."""
    if raw.startswith(ZIP_MAGIC):
        return "zip", None
    for magic, compression in COMPRESSED:
        if magic.match(raw):
            return "tar", compression
    # A block of zeros is an empty tar to tarfile; a text file of NULs is not taken for one.
    if raw[:512].strip(b"\x00") and tarfile.is_tarfile(io.BytesIO(raw)):
        return "tar", None
    # Not recognised: the name says what the upload claims to be, and an archive that is not
    # one is then refused with the library's reason.
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip", None
    for suffix, compression in TAR_NAMES:
        if lower.endswith(suffix):
            return "tar", compression
    return "plain", None


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turn a library's complaint into ``bad_archive`` saying ``what`` failed and why."""
    try:
        yield
    except ArchiveError:
        raise
    except LIBRARY_ERRORS as exc:
        raise ArchiveError("bad_archive", f"{what}: {exc}") from exc


def _clean_path(entry: str) -> str:
    """The entry's POSIX path inside the folder ('' for the folder itself), or unsafe_path."""
    if "\x00" in entry:
        raise ArchiveError("unsafe_path", f"{entry!r}: a NUL in the name")
    try:
        entry.encode("utf-8")
    except UnicodeEncodeError:  # a tar name in another encoding, kept as surrogates by tarfile
        raise ArchiveError("unsafe_path", f"{entry!r}: a name that is not UTF-8") from None
    # A backslash is a separator to Windows tools, so it is one here: ..\x leaves the folder.
    posix = entry.replace("\\", "/")
    if posix.startswith("/") or DRIVE.match(posix):
        raise ArchiveError("unsafe_path", f"{entry}: an absolute path")
    parts = [part for part in posix.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError("unsafe_path", f"{entry}: a path that leaves the folder (..)")
    return "/".join(parts)


def _is_noise(path: str) -> bool:
    """Files an OS or a tool leaves beside a team's files, which no format reader wants."""
    parts = path.split("/")
    return (
        "__MACOSX" in parts[:-1]
        or ".git" in parts
        or parts[-1] == ".DS_Store"
        or parts[-1].startswith("._")  # AppleDouble metadata beside each file of a macOS zip
    )


def _file_path(entry: str) -> str | None:
    """The path a regular file is kept at, or None for noise."""
    path = _clean_path(entry)
    if not path:
        raise ArchiveError("unsafe_path", f"{entry}: a file without a name")
    return None if _is_noise(path) else path


def _add(files: dict[str, bytes], path: str, limits: _Limits) -> None:
    """Count one more file at ``path``, refusing a second file there before reading it."""
    if path in files:
        raise ArchiveError("duplicate_path", f"{path}: twice in the archive")
    limits.one_more(path)


def _read_plain(name: str, raw: bytes, limits: _Limits) -> dict[str, bytes]:
    base = PurePosixPath(name.replace("\\", "/")).name
    if not base.lower().endswith(PLAIN):
        raise ArchiveError(
            "unsupported_upload",
            f"{name}: not a zip or tar archive, nor a .jsonl, .json, .md or .yaml file",
        )
    path = _clean_path(base)
    limits.one_more(path)
    limits.spend(path, len(raw))
    return {path: raw}


def _zip_kind(info: zipfile.ZipInfo) -> str:
    """``dir``, ``file``, ``link`` or ``special``, from the name and the Unix mode bits."""
    mode = stat.S_IFMT(info.external_attr >> 16)
    if info.orig_filename.endswith(("/", "\\")) or mode == stat.S_IFDIR:
        return "dir"
    if mode == stat.S_IFLNK:
        return "link"
    return "file" if mode in (0, stat.S_IFREG) else "special"


def _zip_readable(info: zipfile.ZipInfo) -> None:
    if info.flag_bits & 0x1:
        raise ArchiveError("unsupported_upload", f"{info.orig_filename}: encrypted")
    if info.compress_type not in READ_ZIP_METHODS:
        method = ZIP_METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
        raise ArchiveError(
            "unsupported_upload",
            f"{info.orig_filename}: compressed with {method}; only stored and deflated "
            "entries are read",
        )


def _zip_entries(name: str, raw: bytes, limit: int) -> None:
    """Refuse (``too_many_files``) a zip whose central directory lists more than ``limit``
    entries, found as ``zipfile`` finds them but counted without building anything.

    The end record's count is checked first; the directory is then walked, because that
    count can lie and ``zipfile`` reads as many entries as the directory's size holds. A zip
    whose records are damaged is left to ``zipfile`` to describe.
    """
    end = len(raw) - END.size
    if not (raw[end : end + 4] == END_SIGNATURE and raw[-2:] == b"\x00\x00"):
        end = raw.rfind(END_SIGNATURE, max(0, len(raw) - END.size - 0xFFFF))
    if end < 0 or end + END.size > len(raw):
        return
    _, _, _, on_disk, total, size, _, _ = END.unpack_from(raw, end)
    directory_end = end
    locator = end - LOCATOR64.size
    record = locator - END64.size
    if (
        record >= 0
        and raw[locator : locator + 4] == LOCATOR64_SIGNATURE
        and raw[record : record + 4] == END64_SIGNATURE
    ):
        *_, on_disk, total, size, _ = END64.unpack_from(raw, record)
        directory_end = record
    entries = max(on_disk, total)
    if entries > limit:
        raise ArchiveError(
            "too_many_files", f"{name}: the zip lists {entries} entries; the limit is {limit}"
        )
    position, entries = directory_end - size, 0
    while position >= 0 and position + CENTRAL.size <= directory_end:
        header = CENTRAL.unpack_from(raw, position)
        if header[0] != CENTRAL_SIGNATURE:
            return
        entries += 1
        if entries > limit:
            raise ArchiveError("too_many_files", f"{name}: the zip lists more than {limit} entries")
        name_length, extra_length, comment_length = header[12:15]
        position += CENTRAL.size + name_length + extra_length + comment_length


def _read_zip(name: str, raw: bytes, limits: _Limits) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    _zip_entries(name, raw, ENTRIES_PER_FILE * limits.max_files)
    with _reading(f"{name}: not a readable zip"), zipfile.ZipFile(io.BytesIO(raw)) as archive:
        for info in archive.infolist():
            # orig_filename: zipfile cuts ``filename`` at a NUL, hiding what the entry claims.
            entry = info.orig_filename
            kind = _zip_kind(info)
            if kind == "dir":
                _clean_path(entry)
                continue
            path = _file_path(entry)
            if path is None:
                continue
            if kind == "link":
                raise ArchiveError("link_in_archive", f"{entry}: a symbolic link")
            if kind == "special":
                raise ArchiveError("special_file", f"{entry}: not a regular file")
            _zip_readable(info)
            _add(files, path, limits)
            with _reading(f"{path}: not readable in the zip"), archive.open(info) as member:
                files[path] = _read_chunks(member, partial(limits.spend, path))
    return files


def _read_chunks(handle: Readable, spend: Callable[[int], None] | None = None) -> bytes:
    """Read in chunks; ``spend`` counts each one, so a bomb stops at the limit, not after."""
    chunks = []
    while chunk := handle.read(CHUNK):
        if spend is not None:
            spend(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


class _Counted:
    """A decompressed stream whose every byte read is spent against the limits.

    ``entry`` names what is being read when the limit is passed: the upload while tarfile
    reads headers, the member while its content is read.
    """

    def __init__(self, stream: Readable, limits: _Limits, entry: str):
        self.stream, self.limits, self.entry = stream, limits, entry

    def read(self, size: int = -1, /) -> bytes:
        if size is None or size < 0:
            return _read_chunks(self)
        chunk = self.stream.read(min(size, CHUNK))
        self.limits.spend(self.entry, len(chunk))
        return chunk


def _decompressed(raw: bytes, compression: str | None) -> Readable:
    # These readers give at most the size asked for per read, whatever the ratio.
    buffer = io.BytesIO(raw)
    if compression == "gz":
        return gzip.GzipFile(fileobj=buffer, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(buffer)
    if compression == "xz":
        return lzma.LZMAFile(buffer)
    return buffer


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.issym() or member.islnk():
        return "link"
    return "file" if member.isfile() else "special"


def _read_tar(name: str, raw: bytes, compression: str | None, limits: _Limits) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    stream = _Counted(_decompressed(raw, compression), limits, name)
    # A stream ("r|"): read once, front to back, through the counter; nothing seeks back.
    with _reading(f"{name}: not a readable tar"), tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            kind = _tar_kind(member)
            if kind == "dir":
                _clean_path(member.name)
                continue
            path = _file_path(member.name)
            if path is None:
                continue
            if kind == "link":
                raise ArchiveError("link_in_archive", f"{member.name}: a link")
            if kind == "special":
                raise ArchiveError("special_file", f"{member.name}: not a regular file")
            _add(files, path, limits)
            stream.entry = path
            with _reading(f"{path}: not readable in the tar"):
                files[path] = _read_chunks(tar.extractfile(member))
            stream.entry = name
        # Read to the end: a compressed stream checks its CRC and length only there.
        while stream.read(CHUNK):
            pass
    return files
