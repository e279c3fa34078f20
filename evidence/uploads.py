"""Streaming uploads: each chunk is written to a temporary file and hashed as it arrives.

The upload is never held in memory and never read twice to hash it; past the size
limit it stops at once and the partial file is removed.
"""

import contextlib
import hashlib
import os
import tempfile

from django.conf import settings
from django.core.files.uploadedfile import TemporaryUploadedFile, UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload


class HashingUploadedFile(TemporaryUploadedFile):
    """A temporary uploaded file, in ``FACTORY_UPLOAD_TEMP_DIR``, that knows its SHA-256
    and, counted on the way in, its lines and whether it holds a NUL byte."""

    sha256: str = ""
    text_stats: dict | None = None

    def __init__(self, name, content_type, size, charset, content_type_extra=None):
        directory = settings.FACTORY_UPLOAD_TEMP_DIR
        os.makedirs(directory, exist_ok=True)
        # Closed (and so deleted) by the handler's discard() when the response is sent.
        file = tempfile.NamedTemporaryFile(suffix=".upload", dir=directory)  # noqa: SIM115
        # Skip TemporaryUploadedFile.__init__, which would open a second file elsewhere.
        UploadedFile.__init__(self, file, name, content_type, size, charset, content_type_extra)


class HashingUploadHandler(FileUploadHandler):
    """Write each file to a temporary file beside the evidence store, hashing while streaming."""

    chunk_size = 1024 * 1024

    def __init__(self, request=None):
        super().__init__(request)
        self.too_large = False
        self.files: list[HashingUploadedFile] = []

    def new_file(self, *args, **kwargs):
        super().new_file(*args, **kwargs)
        self.file = HashingUploadedFile(
            self.file_name, self.content_type, 0, self.charset, self.content_type_extra
        )
        self.files.append(self.file)
        self.digest = hashlib.sha256()
        self.received = 0
        self.lines, self.nul, self.last = 0, False, b""

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > settings.FACTORY_MAX_UPLOAD_BYTES:
            self.too_large = True
            self.discard()
            raise StopUpload(connection_reset=True)
        self.digest.update(raw_data)
        # Counting here spares a second pass over a large log (both are C-speed scans).
        self.lines += raw_data.count(b"\n")
        self.nul = self.nul or b"\x00" in raw_data
        self.last = raw_data[-1:] or self.last
        self.file.write(raw_data)
        return None

    def file_complete(self, file_size):
        self.file.seek(0)
        self.file.size = file_size
        self.file.sha256 = self.digest.hexdigest()
        lines = self.lines + (1 if file_size and self.last != b"\n" else 0)
        self.file.text_stats = {"lines": lines, "nul": self.nul}
        return self.file

    def upload_interrupted(self):
        self.discard()

    def discard(self):
        """Close (and so delete) every temporary file this upload created."""
        for file in self.files:
            with contextlib.suppress(FileNotFoundError):
                file.close()
