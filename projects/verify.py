"""A project's repository and its ``verify`` block: what the runner fetches and runs.

Pure validation, no I/O. Each text field is checked against one pattern, and the API's
schema publishes the same patterns (``projects.api``), so a request the schema allows
is never refused for its form. ``clean_repository_url`` accepts what git fetches over
its own transports (``https://``, ``http://``, ``ssh://``, ``git://``, ``file:///``, an
absolute path, ``user@host:path``) and nothing else: ``ext::`` and the other transport
helpers run commands. A local repository inside the server's own directories is a
conflict with the server (409), which no pattern can say. ``clean_verify`` fills in the
defaults and names every field it refuses.
"""

import posixpath
import re
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from projects.errors import Conflict

_TEXT = r"[^\s\x00-\x1f\x7f]"  # no space, no control character
_NAME = r"[^/\\\x00-\x1f\x7f]"  # a character of a path segment
_FIRST = r"[^./\\\x00-\x1f\x7f]"
# A path segment that is neither "." nor "..": the repository's own files only.
_SEGMENT = rf"(?:{_FIRST}{_NAME}*|\.{_FIRST}{_NAME}*|\.\.{_NAME}+)"
REPORT_PATH_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
REPOSITORY_PATTERN = (
    rf"^(?:(?:https?|ssh|git)://{_TEXT}+|file://(?:/{_SEGMENT})+|(?:/{_SEGMENT})+"
    rf"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:{_TEXT}+)$"
)
# Words joined by single dots, slashes or hyphens: main, release/2.x, feature-1.
BRANCH_PATTERN = r"^[A-Za-z0-9_]+(?:[./-][A-Za-z0-9_]+)*$"
COMMAND_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"  # something besides spaces; no NUL
MAX_COMMAND = 10_000
MAX_PATH = 1000
MAX_URL = 2000
MAX_BRANCH = 200
MAX_SETUP = 20


def _matches(pattern: str, value, limit: int) -> bool:
    return (
        isinstance(value, str) and len(value) <= limit and re.fullmatch(pattern, value) is not None
    )


def local_path(url: str) -> Path | None:
    """The directory a local repository URL names (``file:///…`` or a path), else None."""
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if url.startswith("/"):
        return Path(url)
    return None


def clean_repository_url(url: str) -> str:
    """A repository URL git may fetch from, or a ValidationError naming what is wrong.

    A local repository may not lie inside the server's own directories (its code,
    media, or the runner's mirrors), which the runner would otherwise copy into a
    sandbox (409 ``repository_not_allowed``), except under
    ``FACTORY_RUNNER_ROOT/repositories``, where the site keeps repositories of its own
    (the demo's).
    """
    if url == "":
        return ""
    if not _matches(REPOSITORY_PATTERN, url, MAX_URL):
        helper = "::" in url.split("/", 1)[0]
        raise ValidationError(
            {
                "repository_url": "git's transport helpers (such as ext::) are refused: they run commands"
                if helper
                else "use an https://, ssh://, git:// or file:/// URL, an absolute path, "
                "or user@host:path, without spaces"
            }
        )
    path = local_path(url)
    if path is not None:
        resolved = Path(posixpath.normpath(str(path)))
        hosted = Path(settings.FACTORY_RUNNER_ROOT).resolve() / "repositories"
        if hosted in resolved.parents:
            return url
        for private in _server_directories():
            if resolved == private or private in resolved.parents or resolved in private.parents:
                raise Conflict(
                    f"{url} is one of the server's own directories; a local repository may not be",
                    code="repository_not_allowed",
                )
    return url


def _server_directories() -> list[Path]:
    return [
        Path(settings.BASE_DIR).resolve(),
        Path(settings.MEDIA_ROOT).resolve(),
        Path(settings.FACTORY_RUNNER_ROOT).resolve() / "mirrors",
    ]


def clean_branch(branch: str) -> str:
    if not _matches(BRANCH_PATTERN, branch, MAX_BRANCH):
        raise ValidationError(
            {"default_branch": "a branch name: words joined by single . / or -, like release/2.x"}
        )
    return branch


VERIFY_DEFAULTS = {
    "setup": [],
    "test": "",
    "junit": "",
    "coverage": None,
    "timeout_seconds": 600,
    "memory_mb": 2048,
    "output_limit_bytes": 4 * 1024 * 1024,
    "setup_network": False,
}


def verify_bounds() -> dict:
    """The limits a project may choose, as ``{field: (lowest, highest)}`` (settings)."""
    return {
        "timeout_seconds": (1, settings.FACTORY_RUNNER_MAX_SECONDS),
        "memory_mb": (64, settings.FACTORY_RUNNER_MAX_MEMORY_MB),
        "output_limit_bytes": (1024, settings.FACTORY_RUNNER_MAX_OUTPUT_BYTES),
    }


def _command(value, field: str) -> str:
    if not _matches(COMMAND_PATTERN, value, MAX_COMMAND):
        raise ValidationError(
            {field: f"a command (run by sh -c): not blank, at most {MAX_COMMAND} characters"}
        )
    return value


def _report_path(value, field: str) -> str:
    if not _matches(REPORT_PATH_PATTERN, value, MAX_PATH):
        raise ValidationError(
            {field: "a path relative to the repository root, with no '.', '..' or empty segment"}
        )
    return value


def clean_verify(value) -> dict:
    """The verify block with its defaults, or a ValidationError naming each bad field.

    ``{}`` means the project has no runner. Otherwise ``test`` and ``junit`` are
    required; limits are whole numbers within the site's bounds (settings
    ``FACTORY_RUNNER_MAX_*``).
    """
    if value in (None, {}):
        return {}
    if not isinstance(value, dict):
        raise ValidationError({"verify": 'must be an object: {"test": "…", "junit": "…"}'})
    unknown = sorted(set(value) - set(VERIFY_DEFAULTS))
    if unknown:
        raise ValidationError({f"verify.{name}": "unknown field" for name in unknown})
    cleaned = {**VERIFY_DEFAULTS, **value}
    errors = {}

    def field(name, clean):
        try:
            cleaned[name] = clean(cleaned[name], f"verify.{name}")
        except ValidationError as exc:
            errors.update(exc.message_dict)

    if not isinstance(cleaned["setup"], list) or len(cleaned["setup"]) > MAX_SETUP:
        errors["verify.setup"] = [f"a list of at most {MAX_SETUP} commands"]
    else:
        cleaned["setup"] = list(cleaned["setup"])
        for index, command in enumerate(cleaned["setup"]):
            try:
                _command(command, f"verify.setup[{index}]")
            except ValidationError as exc:
                errors.update(exc.message_dict)
    field("test", _command)
    field("junit", _report_path)
    if cleaned["coverage"] is not None:
        field("coverage", _report_path)
    for name, (low, high) in verify_bounds().items():
        number = cleaned[name]
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            errors[f"verify.{name}"] = [f"a whole number from {low} to {high}"]
    if not isinstance(cleaned["setup_network"], bool):
        errors["verify.setup_network"] = ["true or false"]
    if errors:
        raise ValidationError(errors)
    return cleaned
