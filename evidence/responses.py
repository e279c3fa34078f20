"""Evidence files as HTTP responses: streamed, never read whole, one byte range at a time.

Django's ``FileResponse`` streams but knows nothing of ``Range``; this adds the single
range of RFC 9110 §14 (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``): 206 with
``Content-Range``, 416 when the range starts past the end. Anything else in the
header (several ranges, another unit, a malformed value, an ``If-Range`` that names
other bytes) is ignored and the whole file is sent, as the RFC allows. Every answer
keeps evidence from being rendered as a page: ``nosniff`` and a sandboxing policy.
"""

import re

from django.http import FileResponse, JsonResponse

from evidence import storage

RANGE = re.compile(r"bytes=(\d*)-(\d*)", re.ASCII)
UNSATISFIABLE = "unsatisfiable"


class _Window:
    """The next ``length`` bytes of an open file, read as ``FileResponse`` reads."""

    def __init__(self, handle, length: int):
        self.handle, self.left = handle, length

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.handle.read(size) if size else b""
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()


def requested_range(request, size: int, etag: str):
    """``(first, last)`` of the one range asked for, ``None`` for the whole file, or
    ``UNSATISFIABLE``."""
    header = request.headers.get("Range", "")
    if request.method not in ("GET", "HEAD") or not header:
        return None
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range.strip() != etag:
        return None  # the client holds other bytes (or a date): send them all
    match = RANGE.fullmatch(header.strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # the last n bytes
        length = int(last)
        return (max(size - length, 0), size - 1) if length and size else UNSATISFIABLE
    if last and int(first) > int(last):
        return None  # not a valid range: ignored
    if int(first) >= size:
        return UNSATISFIABLE
    return int(first), min(int(last), size - 1) if last else size - 1


def evidence_response(request, evidence, *, content_type: str, as_attachment: bool):
    """The evidence file, streamed, whole (200) or the one range the request asks for (206)."""
    size, etag = evidence.size, f'"{evidence.sha256}"'
    wanted = requested_range(request, size, etag)
    if wanted == UNSATISFIABLE:
        response = JsonResponse(
            {
                "detail": f"the range {request.headers['Range']!r} lies outside the file's"
                f" {size} bytes",
                "code": "range_not_satisfiable",
            },
            status=416,
        )
        response["Content-Range"] = f"bytes */{size}"
    else:
        handle = storage.open_blob(evidence.file.name)
        if wanted is None:
            response = FileResponse(
                handle,
                content_type=content_type,
                as_attachment=as_attachment,
                filename=evidence.name,
            )
        else:
            first, last = wanted
            handle.seek(first)
            response = FileResponse(
                _Window(handle, last - first + 1),
                status=206,
                content_type=content_type,
                as_attachment=as_attachment,
                filename=evidence.name,
            )
            response["Content-Length"] = str(last - first + 1)
            response["Content-Range"] = f"bytes {first}-{last}/{size}"
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    # Evidence is hostile until proven otherwise: never let a browser treat it as a page.
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
