"""Repository paths: the boundary a task's change must stay inside, and paths read from diffs.

Pure functions, no database. A task's ``allowed_paths`` are relative POSIX globs
(``templates/**``); a path read from a diff is hostile until normalised by
``repo_path``, which refuses anything that could name a file outside the repository.
"""

import fnmatch
import posixpath
import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError

_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafePath(ValueError):
    """A path that does not stay inside the repository; its message says why."""


def repo_path(path: str) -> str:
    """``path`` as a clean path relative to the repository root, or ``UnsafePath``.

    Refused: an empty path, NUL or other control characters, backslashes (another
    separator on some systems), absolute paths and drive letters, and any ``..``
    segment (git never writes one, so it is an attempt to step outside). Redundant
    ``./`` segments and doubled slashes are removed.
    """
    if not path:
        raise UnsafePath("an empty path")
    if any(ord(char) < 32 or char == "\x7f" for char in path):
        raise UnsafePath("a control character (NUL, newline…) in the path")
    if "\\" in path:
        raise UnsafePath("a backslash in the path")
    if path.startswith("/") or _DRIVE.match(path):
        raise UnsafePath("an absolute path")
    if ".." in path.split("/"):
        raise UnsafePath("a '..' segment")
    normal = posixpath.normpath(path)
    if normal in (".", "") or normal.startswith("../"):
        raise UnsafePath("a path that names no file inside the repository")
    return normal


# Whitespace as str.strip() sees it (ECMA's \s leaves out \x1c-\x1f and \x85).
_SPACE = r"[\s\u001c-\u001f\u0085]"
# What clean_allowed_paths takes, as a pattern for the API's schema, on the value as sent
# (it is trimmed before it is checked): something besides whitespace, no NUL or backslash,
# no leading / and no ".." segment.
ALLOWED_PATH_PATTERN = (
    rf"^{_SPACE}*(?!{_SPACE})(?!/)(?!\.\.(?:/|{_SPACE}*$))"
    rf"(?:(?!/\.\.(?:/|{_SPACE}*$))[^\\\u0000])+$"
)


def clean_allowed_paths(paths: Iterable[str]) -> list[str]:
    """Relative POSIX globs with no ``..``: the boundary a change must stay inside
    (``ALLOWED_PATH_PATTERN`` says the same of each path, before it is trimmed)."""
    cleaned = []
    for path in paths:
        if not isinstance(path, str) or not path.strip():
            raise ValidationError({"allowed_paths": "each path must be a non-empty string"})
        path = path.strip()
        if "\x00" in path:
            raise ValidationError({"allowed_paths": "a path may not contain NUL characters"})
        if path.startswith("/") or ".." in path.split("/") or "\\" in path:
            raise ValidationError(
                {"allowed_paths": f"'{path}' must be relative to the repository root, without .."}
            )
        cleaned.append(path)
    return cleaned


def path_allowed(path: str, allowed_paths: Iterable[str]) -> bool:
    """Whether a clean repository path (``repo_path``) lies inside one of the globs.

    ``dir/**`` covers everything below ``dir``. Callers normalise first: matching a
    raw ``templates/../settings.py`` against ``templates/**`` would wrongly succeed.
    """
    for pattern in allowed_paths:
        if pattern.endswith("/**") and (path == pattern[:-3] or path.startswith(pattern[:-2])):
            return True
        if fnmatch.fnmatchcase(path, pattern):
            return True
    return False


_GLOB = re.compile(r"[*?\[]")


def paths_may_overlap(first: Iterable[str], second: Iterable[str]) -> bool:
    """Whether two tasks' ``allowed_paths`` may name a common file: conservative, so a
    claim that avoids overlap never misses one. An empty list allows every path. Two
    plain paths overlap when equal; a plain path and a glob when the glob covers it; two
    globs when the plain part of one (before its first wildcard) begins the other's."""
    first, second = list(first), list(second)
    if not first or not second:
        return True
    for a in first:
        for b in second:
            a_glob, b_glob = _GLOB.search(a), _GLOB.search(b)
            if not a_glob and not b_glob:
                if a == b:
                    return True
            elif not a_glob or not b_glob:
                plain, pattern = (a, b) if not a_glob else (b, a)
                if path_allowed(plain, [pattern]):
                    return True
            else:
                a_head, b_head = a[: a_glob.start()], b[: b_glob.start()]
                if a_head.startswith(b_head) or b_head.startswith(a_head):
                    return True
    return False
