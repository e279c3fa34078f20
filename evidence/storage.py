"""Content-addressed blob storage on top of any Django storage backend."""

import contextlib
import hashlib

from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage

from evidence.models import blob_name

CHUNK = 1024 * 1024


def sha256_of(fileobj: File) -> tuple[str, int]:
    """Hash a file in chunks (hashlib uses the CPU's SHA instructions); rewinds it."""
    digest, size = hashlib.sha256(), 0
    for chunk in fileobj.chunks(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    fileobj.seek(0)
    return digest.hexdigest(), size


def store_blob(fileobj: File, *, sha256: str | None = None, size: int | None = None):
    """Store bytes under their SHA-256 unless they are there already.

    Returns ``(name, sha256, size, created)``; ``created`` says whether the bytes were new
    here. A name that exists is reused and never rewritten, and nothing stored is ever
    deleted (evidence.backends): bytes whose row was then refused stay, unreferenced and
    uncounted, because another request may already rely on them (ADR 0017).
    """
    if sha256 is None or size is None:
        sha256, size = sha256_of(fileobj)
    name = blob_name(sha256)
    if default_storage.exists(name):
        return name, sha256, size, False
    # The evidence stores return the same name when a racing request stored it first.
    return default_storage.save(name, fileobj), sha256, size, True


def store_bytes(content: bytes):
    return store_blob(ContentFile(content))


def open_blob(name: str):
    """The blob, open for reading: streamed from disk or in ranged GETs from a bucket."""
    return default_storage.open(name, "rb")


def storage_check() -> None:
    """Raise if the evidence store cannot be read; writes nothing.

    Lists the folder every blob lives under (``blob_name``), through the same storage
    object the blobs are written with: one request on S3, one directory on disk. A local
    store that holds no evidence yet has no such folder, and is ready: the first write
    makes it.
    """
    with contextlib.suppress(FileNotFoundError):
        default_storage.listdir(blob_name("0" * 64).split("/", 1)[0])
