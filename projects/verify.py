"""A project's repository and its ``verify`` block: what the runner fetches and runs.

Pure validation, no I/O. ``clean_repository_url`` accepts what git fetches over its
safe transports (``https://``, ``http://``, ``ssh://``, ``git://``, ``file://``, a local
path, ``user@host:path``) and refuses the rest, ``ext::`` above all (it runs a command).
``clean_verify`` fills in the defaults and names every field it refuses.
"""

import posixpath
import re
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from projects.paths import UnsafePath, repo_path

_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")
_SCP_LIKE = re.compile(
    r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:/.+$"
)
_BRANCH = re.compile(r"^(?!/)(?!.*(?:\.\.|//|@\{|\.lock$|/$|\.$))[A-Za-z0-9._/-]{1,200}$")


def local_path(url: str) -> Path | None:
    """The directory a local repository URL names (``file://`` or a path), else None."""
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if url.startswith("/"):
        return Path(url)
    return None


def clean_repository_url(url: str) -> str:
    """A repository URL git may fetch from, or a ValidationError naming what is wrong.

    A local repository may not lie inside the server's own directories (its code,
    media, or the runner's mirrors), which the runner would otherwise copy into a
    sandbox, except under ``FACTORY_RUNNER_ROOT/repositories``, where the site keeps
    repositories of its own (the demo's).
    """
    url = (url or "").strip()
    if not url:
        return ""
    if any(ord(char) < 32 or char == "\x7f" for char in url) or url.startswith("-"):
        raise ValidationError(
            {"repository_url": "the URL may not start with '-' or hold control characters"}
        )
    if "::" in url.split("/", 1)[0]:
        raise ValidationError(
            {
                "repository_url": "git's transport helpers (such as ext::) are refused: they run commands"
            }
        )
    if not (url.startswith(_SCHEMES) or url.startswith("/") or _SCP_LIKE.match(url)):
        raise ValidationError(
            {
                "repository_url": "use an https://, ssh://, git:// or file:// URL, an absolute path, "
                "or user@host:path"
            }
        )
    path = local_path(url)
    if path is not None:
        if not path.is_absolute() or ".." in path.parts:
            raise ValidationError(
                {"repository_url": "a local repository needs an absolute path without '..'"}
            )
        resolved = Path(posixpath.normpath(str(path)))
        hosted = Path(settings.FACTORY_RUNNER_ROOT).resolve() / "repositories"
        if hosted in resolved.parents:
            return url  # a repository the site hosts itself (the demo's)
        for private in _server_directories():
            if resolved == private or private in resolved.parents or resolved in private.parents:
                raise ValidationError(
                    {
                        "repository_url": "a local repository may not be one of the server's own directories"
                    }
                )
    return url


def _server_directories() -> list[Path]:
    return [
        Path(settings.BASE_DIR).resolve(),
        Path(settings.MEDIA_ROOT).resolve(),
        Path(settings.FACTORY_RUNNER_ROOT).resolve() / "mirrors",
    ]


def clean_branch(branch: str) -> str:
    branch = (branch or "").strip()
    if not _BRANCH.match(branch) or branch.startswith("-"):
        raise ValidationError({"default_branch": "a branch name such as main or release/2.x"})
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


def _bounds() -> dict:
    return {
        "timeout_seconds": (1, settings.FACTORY_RUNNER_MAX_SECONDS),
        "memory_mb": (64, settings.FACTORY_RUNNER_MAX_MEMORY_MB),
        "output_limit_bytes": (1024, settings.FACTORY_RUNNER_MAX_OUTPUT_BYTES),
    }


def _command(value, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError({field: "a command must be a non-empty string (run by sh -c)"})
    if len(value) > 10_000 or "\x00" in value:
        raise ValidationError({field: "a command holds at most 10,000 characters and no NUL"})
    return value


def _report_path(value, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError({field: "a path relative to the repository root"})
    try:
        return repo_path(value.strip())
    except UnsafePath as exc:
        raise ValidationError(
            {field: f"a path relative to the repository root, not {exc}"}
        ) from None


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

    if not isinstance(cleaned["setup"], list) or len(cleaned["setup"]) > 20:
        errors["verify.setup"] = ["a list of at most 20 commands"]
    else:
        cleaned["setup"] = list(cleaned["setup"])
        for index, command in enumerate(cleaned["setup"]):
            try:
                cleaned["setup"][index] = _command(command, f"verify.setup[{index}]")
            except ValidationError as exc:
                errors.update(exc.message_dict)
    field("test", _command)
    field("junit", _report_path)
    if cleaned["coverage"] is not None:
        field("coverage", _report_path)
    for name, (low, high) in _bounds().items():
        number = cleaned[name]
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            errors[f"verify.{name}"] = [f"a whole number from {low} to {high}"]
    if not isinstance(cleaned["setup_network"], bool):
        errors["verify.setup_network"] = ["true or false"]
    if errors:
        raise ValidationError(errors)
    return cleaned
