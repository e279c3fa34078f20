"""The evidence stores: each file is written once under its SHA-256, then only read.

``STORAGES["default"]`` names one of these (``FACTORY_EVIDENCE_STORAGE``: ``filesystem``
or ``s3``; docs/deploy.md). Both keep the same three promises (ADR 0017):

- **A name is written once.** A blob's name is the hash of its bytes, so a name that
  exists already holds these bytes: it is reused, never rewritten and never given a
  second name beside it.
- **Nothing is deleted.** ``delete`` raises ``DeleteRefused``; the application never
  calls it, and a store that would be asked anyway says so instead of obeying.
- **Nothing is read whole** (ADR 0008). On S3 a file is read in ranged GETs of at most
  ``WINDOW`` bytes as the reader advances; seeking costs nothing until the next read.
"""

import io

from botocore.exceptions import ClientError
from django.core.files.base import File
from django.core.files.storage import FileSystemStorage
from storages.backends.s3 import S3Storage
from storages.utils import clean_name

WINDOW = 8 * 1024 * 1024  # bytes asked for by one ranged GET
BUFFER = 64 * 1024  # what the parsers read at a time (evidence.parsers.CHUNK)
# One PUT carries at most 5 GiB (S3's limit); larger files go up in parts.
SINGLE_PUT_MAX = 5 * 1024**3


class DeleteRefused(PermissionError):
    """Evidence never changes once written (docs/decisions/0017): no store deletes it."""


class _Stored(Exception):
    """The name exists already, so its bytes are there: nothing to write."""


class WriteOnceMixin:
    """``save`` writes a name that is not there yet and returns an existing one as it is."""

    def save(self, name, content, max_length=None):
        try:
            return super().save(name, content, max_length=max_length)
        except _Stored:
            return clean_name(name)

    def get_available_name(self, name, max_length=None):
        # Called before writing and, on disk, again when a racing writer got there first:
        # either way the same name means the same bytes, which are kept as they are.
        if self.exists(name):
            raise _Stored
        return name

    def delete(self, name):
        raise DeleteRefused(f"evidence is never deleted ({name})")


class EvidenceFileSystemStorage(WriteOnceMixin, FileSystemStorage):
    """Evidence under ``MEDIA_ROOT``: written once (``O_EXCL``), never deleted."""


class EvidenceS3Storage(WriteOnceMixin, S3Storage):
    """Evidence in an S3-compatible bucket, written once, never deleted, read in ranges.

    A new object goes up with ``If-None-Match: *`` so that of two requests storing the
    same bytes at once only the first writes; the second's 412 means "already there".
    """

    def _get_write_parameters(self, name, content=None):
        # Never the uploader's media type or an encoding guessed from a name: were the
        # object ever fetched from the bucket itself, it would be bytes, not a page.
        return {**self.get_object_parameters(name), "ContentType": "application/octet-stream"}

    def _save(self, name, content):
        name = clean_name(name)
        size = content.size
        if size is None or size > SINGLE_PUT_MAX:
            # s3transfer's multipart upload takes no condition; save() checked the name.
            return super()._save(name, content)
        content.seek(0)
        params = self._get_write_parameters(name, content)
        try:
            self.connection.meta.client.put_object(
                Bucket=self.bucket_name,
                Key=self._normalize_name(name),
                # The open file itself: a Django File is falsy without a name, and botocore
                # would then send no body at all.
                Body=content.file,
                ContentLength=size,
                IfNoneMatch="*",
                **params,
            )
        except ClientError as error:
            # 412: the object exists; 409: another PUT of it is in flight. Same bytes either way.
            if _status(error) not in (409, 412):
                raise
        return name

    def _open(self, name, mode="rb"):
        if mode not in ("r", "rb"):
            raise ValueError("evidence is opened for reading only")
        key = self._normalize_name(clean_name(name))
        client = self.connection.meta.client
        try:
            head = client.head_object(Bucket=self.bucket_name, Key=key)
        except ClientError as error:
            if _status(error) == 404:
                raise FileNotFoundError(f"no evidence file {name}") from None
            raise
        raw = RangedObject(client, self.bucket_name, key, head["ContentLength"], head["ETag"])
        return File(io.BufferedReader(raw, BUFFER), name=name)


class RangedObject(io.RawIOBase):
    """One S3 object as a seekable file, read in ranged GETs of at most ``WINDOW`` bytes.

    Each GET carries the object's ETag (``If-Match``), so a file read in several windows
    is one version's bytes. A reader closed early leaves at most one window unread.
    """

    def __init__(self, client, bucket: str, key: str, size: int, etag: str):
        self.client, self.bucket, self.key, self.size, self.etag = client, bucket, key, size, etag
        self.position = 0
        self.body = None  # the open GET's stream, which starts at ``position``

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        if start + offset < 0:
            raise ValueError("a negative position")
        if start + offset != self.position:
            self._drop()
            self.position = start + offset
        return self.position

    def readinto(self, buffer) -> int:
        if self.position >= self.size or not len(buffer):
            return 0
        data = self.body.read(len(buffer)) if self.body is not None else b""
        if not data:  # no window open yet, or the open one is used up
            self._drop()
            last = min(self.position + WINDOW, self.size) - 1
            self.body = self.client.get_object(
                Bucket=self.bucket,
                Key=self.key,
                Range=f"bytes={self.position}-{last}",
                IfMatch=self.etag,
            )["Body"]
            data = self.body.read(len(buffer))
            if not data:
                raise OSError(f"{self.key} ended at {self.position} of {self.size} bytes")
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def close(self) -> None:
        self._drop()
        super().close()

    def _drop(self) -> None:
        if self.body is not None:
            self.body.close()
            self.body = None


def _status(error: ClientError) -> int:
    return error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
