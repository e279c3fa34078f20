"""Content-addressed blob storage on top of any Django storage backend."""

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

    Returns ``(name, sha256, size, created)``; ``created`` says whether this call wrote
    the blob (so a caller whose transaction then fails can remove what it added).
    """
    if sha256 is None or size is None:
        sha256, size = sha256_of(fileobj)
    name = blob_name(sha256)
    if default_storage.exists(name):
        return name, sha256, size, False
    saved = default_storage.save(name, fileobj)
    if saved != name:
        # Another request stored the same bytes a moment earlier; keep one copy.
        default_storage.delete(saved)
        return name, sha256, size, False
    return name, sha256, size, True


def store_bytes(content: bytes):
    return store_blob(ContentFile(content))


def open_blob(name: str):
    return default_storage.open(name, "rb")


def delete_blob(name: str) -> None:
    default_storage.delete(name)
