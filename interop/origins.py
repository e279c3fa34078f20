"""Where an imported row came from: ``<format>:<origin name>:<the item's own id>``.

The origin name tells uploads apart: two repositories can both hold ``docs/decisions/0013``,
and two beads files can both hold ``api-1``. It is given at upload (``origin_name``) or is
the uploaded file's name without its extension (``service-a.zip`` → ``service-a``), so the
same archive uploaded again finds the rows it made and another archive never does.

An origin name is 1 to 64 ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a
letter or a digit; it has no ``:``, so ``<format>:<name>:`` is read back unambiguously
whatever the item's id holds. Rows imported before origins had names were renamed by
``interop/migrations/0005_origins_name_their_upload.py`` (ADR 0014).
"""

import re
import unicodedata
from pathlib import PurePosixPath

ORIGIN_NAME_MAX = 64
# JSON Schema's (ECMA) pattern too: ``$`` is safe because names are checked with fullmatch
# here and the API's field trims whitespace before its check.
ORIGIN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ORIGIN_NAME_RULE = (
    "1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or a digit"
)
ORIGIN_MAX = 300  # Imported.origin's max_length
FALLBACK = "upload"
# The extensions an upload is read by (``interop.archive``): a name loses up to two of them
# (``service-a.tar.gz``), and keeps any other dot (``v1.2.zip`` is ``v1.2``).
EXTENSIONS = {
    ".zip",
    ".tar",
    ".tgz",
    ".gz",
    ".tbz2",
    ".bz2",
    ".txz",
    ".xz",
    ".jsonl",
    ".json",
    ".md",
    ".markdown",
    ".yaml",
    ".yml",
    ".txt",
}
_NAME = re.compile(ORIGIN_NAME_PATTERN.removeprefix("^").removesuffix("$"))
_OUTSIDE = re.compile(r"[^A-Za-z0-9._-]+")


def valid_origin_name(name: str) -> bool:
    """Whether ``name`` is an origin name as written (see the module's rule)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def default_origin_name(file_name: str) -> str:
    """The origin name of an upload called ``file_name`` when none is given: its last path
    part less its extensions, accents dropped (``é`` → ``e``), every run of other characters
    one ``-``, cut to 64; ``upload`` when nothing is left. The same file name always gives
    the same name (the data migration 0005 gives earlier uploads theirs by this rule)."""
    base = re.split(r"[\\/]", file_name or "")[-1]
    for _ in range(2):
        suffix = PurePosixPath(base).suffix
        if suffix.lower() not in EXTENSIONS or suffix == base:
            break
        base = base[: -len(suffix)]
    ascii_text = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode()
    name = _OUTSIDE.sub("-", ascii_text).lstrip("._-")[:ORIGIN_NAME_MAX].rstrip("._-")
    return name or FALLBACK


def origin(format: str, origin_name: str, external_id: str) -> str:
    """The origin of the item ``external_id`` of ``format`` uploaded as ``origin_name``."""
    return f"{format}:{origin_name}:{external_id}"[:ORIGIN_MAX]
