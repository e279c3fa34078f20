"""A project's repository and its ``verify`` block: what the runner fetches and runs.

Each text field is checked against one pattern, and the API's schema publishes the same
patterns (``projects.api``), so a request the schema allows is never refused for its
form. ``clean_repository_url`` accepts what git fetches over its own transports
(``https://``, ``http://``, ``ssh://``, ``git://``, ``file:///``, an absolute path,
``user@host:path``) and nothing else: ``ext::`` and the other transport helpers run
commands. Where a repository leads is a matter of the site's policy, which no pattern
can say (409, ``check_repository_location``: the only part that looks at the disk and
the network). ``clean_verify`` fills in the defaults and names every field it refuses.
"""

import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from projects.addresses import AddressRefused, resolve
from projects.errors import Conflict

_TEXT = r"[^\s\x00-\x1f\x7f]"  # no space, no control character
_NAME = r"[^/\\\x00-\x1f\x7f]"  # a character of a path segment
_FIRST = r"[^./\\\x00-\x1f\x7f]"
# A path segment that is neither "." nor "..": the repository's own files only.
_SEGMENT = rf"(?:{_FIRST}{_NAME}*|\.{_FIRST}{_NAME}*|\.\.{_NAME}+)"
REPORT_PATH_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
# The same, with wildcards (* ? [ ]) allowed in the last segment only.
_PLAIN = r"[^/\\\x00-\x1f\x7f*?\[\]]"
_PLAIN_FIRST = r"[^./\\\x00-\x1f\x7f*?\[\]]"
_PLAIN_SEGMENT = rf"(?:{_PLAIN_FIRST}{_PLAIN}*|\.{_PLAIN_FIRST}{_PLAIN}*|\.\.{_PLAIN}+)"
CACHE_KEY_PATTERN = rf"^(?:{_PLAIN_SEGMENT}/)*{_SEGMENT}$"
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
MAX_CACHE_KEYS = 20
# The lock files whose contents choose a project's dependency cache (docs/runner.md).
DEFAULT_CACHE_KEYS = ["uv.lock", "requirements*.txt", "package-lock.json", "go.sum"]


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


def _not_allowed(url: str, why: str) -> Conflict:
    return Conflict(f"{url} {why}", code="repository_not_allowed")


def clean_repository_url(url: str) -> str:
    """A repository URL git may fetch from, or why not.

    Its form is checked first (400 naming ``repository_url``); then where it leads
    (409 ``repository_not_allowed``, ``check_repository_location``).
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
    check_repository_location(url)
    return url


def check_repository_location(url: str) -> list[str]:
    """Refuse (``Conflict``) a repository this site may not fetch from; else git's pins.

    Run when the URL is saved and again before every fetch, since a name may resolve
    elsewhere, or a directory become a link, in between.

    A local repository is judged by its real path (links, ``/proc/self/root`` and
    ``/proc/self/cwd`` resolved): never under ``/proc``, ``/sys`` or ``/dev``, never
    the server's own directories (code, media, the runner's mirrors and workspaces),
    and only under ``FACTORY_RUNNER_ROOT/repositories`` (the site's own, the demo's) or
    a root the operator listed in ``FACTORY_LOCAL_REPOSITORY_ROOTS``.

    A network repository's host must resolve to public addresses only unless
    ``FACTORY_REPOSITORY_ALLOW_PRIVATE`` (``projects.addresses``). The answer is the
    ``git -c`` options that make the fetch connect to exactly the checked addresses
    (http and https through curl's resolve list, git:// by address) and follow no
    redirect, which could lead anywhere.
    """
    if not _matches(REPOSITORY_PATTERN, url, MAX_URL):
        # Saved URLs were checked for their form; one stored before that check was is not
        # trusted now either.
        raise _not_allowed(url, "is not a repository URL this site fetches from")
    path = local_path(url)
    if path is not None:
        _check_local(url, path)
        return []
    scheme, host, port = _network_host(url)
    pins = ["-c", "http.followRedirects=false"]
    if settings.FACTORY_REPOSITORY_ALLOW_PRIVATE:
        return pins
    try:
        checked = resolve(host, port, allow_private=False, what="repositories")
    except AddressRefused as exc:
        raise _not_allowed(url, f"may not be fetched: {exc}") from None
    addresses = [f"[{a}]" if ":" in a else a for a in checked.addresses]
    if scheme in ("http", "https"):
        pins += ["-c", f"http.curloptResolve={host}:{port}:{','.join(addresses)}"]
    elif scheme == "git":
        authority = f"{host}:{port}" if urlsplit(url).port else host
        pins += ["-c", f"url.git://{addresses[0]}:{port}/.insteadOf=git://{authority}/"]
    return pins


def _network_host(url: str) -> tuple[str, str, int]:
    """The scheme, host and port a network URL connects to (scp-like ``user@host:path`` is ssh)."""
    if "://" not in url:
        return "ssh", url.split("@", 1)[1].split(":", 1)[0], 22
    try:
        parts = urlsplit(url)
    except ValueError:  # a lone [ or ] in the host: "Invalid IPv6 URL"
        raise _not_allowed(url, "names no host this site can read") from None
    default = {"http": 80, "https": 443, "git": 9418, "ssh": 22}[parts.scheme]
    try:
        port = parts.port or default
    except ValueError:
        raise _not_allowed(url, "names no valid port") from None
    return parts.scheme, parts.hostname or "", port


# What no repository may be, wherever a link leads: the kernel's views of processes
# (``/proc/self/root`` is the server's own root), of devices, of the system.
KERNEL_DIRECTORIES = (Path("/proc"), Path("/sys"), Path("/dev"))


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _check_local(url: str, path: Path) -> None:
    into_kernel = _not_allowed(url, "leads into /proc, /sys or /dev; a local repository may not")
    if any(_inside(path, k) for k in KERNEL_DIRECTORIES):
        raise into_kernel
    try:
        real = Path(os.path.realpath(path))
    except OSError as exc:
        raise _not_allowed(url, f"cannot be followed ({exc.strerror})") from None
    if any(_inside(real, k) for k in KERNEL_DIRECTORIES):
        raise into_kernel
    hosted = Path(os.path.realpath(Path(settings.FACTORY_RUNNER_ROOT) / "repositories"))
    if _inside(real, hosted):
        return
    for private in _server_directories():
        if _inside(real, private) or _inside(private, real):
            raise _not_allowed(
                url, "is one of the server's own directories; a local repository may not be"
            )
    roots = [Path(os.path.realpath(root)) for root in settings.FACTORY_LOCAL_REPOSITORY_ROOTS]
    if not any(_inside(real, root) for root in roots):
        raise _not_allowed(
            url,
            f"is not under a directory this site keeps repositories in ({', '.join(map(str, roots))})"
            if roots
            else "is a local path, and this site fetches from network repositories only",
        )


def _server_directories() -> list[Path]:
    folders = [settings.BASE_DIR, settings.MEDIA_ROOT, settings.FACTORY_RUNNER_ROOT]
    if settings.FACTORY_RUNNER_CACHE_ROOT:
        # Setup commands write there: a repository in it would be a sandbox's making.
        folders.append(settings.FACTORY_RUNNER_CACHE_ROOT)
    return [Path(os.path.realpath(folder)) for folder in folders]


def same_local_repository(first: str, second: str) -> bool:
    """Whether two repository URLs are one local repository (by real path)."""
    a, b = local_path(first), local_path(second)
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


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
    "cache_keys": DEFAULT_CACHE_KEYS,
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


def _cache_keys(value, field: str) -> list[str]:
    """Lock-file patterns: paths relative to the repository root, wildcards (``* ? [ ]``)
    in the last segment only, so that finding them never walks the tree; [] for no cache."""
    if not isinstance(value, list) or len(value) > MAX_CACHE_KEYS:
        raise ValidationError({field: f"a list of at most {MAX_CACHE_KEYS} lock-file paths"})
    for pattern in value:
        if not _matches(CACHE_KEY_PATTERN, pattern, MAX_PATH):
            raise ValidationError(
                {
                    field: "paths relative to the repository root, with no '.', '..' or empty "
                    "segment, wildcards (* ? [ ]) in the file name only, like requirements*.txt"
                }
            )
    return list(value)


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
    field("cache_keys", _cache_keys)
    if errors:
        raise ValidationError(errors)
    return cleaned


# --- Landing: the merge queue's setting ------------------------------------------------------

# pull_request: landed through the task's pull request on the code host (GitHub), one
# change per merge (ADR 0041).
LANDING_MODES = ("off", "push", "pull_request")
THROUGH_HOST = "pull_request"
LANDING_METHODS = ("squash", "merge")
LANDING_BATCH_MAX = 16
# quarantine_after: flakes after which the project quarantines a test by itself (0: only a
# manager does); release_after: runs passed in a row after which a test leaves quarantine.
LANDING_FLAKES_MAX = 1000
LANDING_DEFAULTS = {
    "mode": "off",
    "method": "squash",
    "batch_max": 4,
    "target_branch": "",
    "quarantine_after": 0,
    "release_after": 20,
}
LANDING_NUMBERS = {
    "batch_max": (1, LANDING_BATCH_MAX),
    "quarantine_after": (0, LANDING_FLAKES_MAX),
    "release_after": (1, LANDING_FLAKES_MAX),
}


# The keys of the changes a project's landing queue holds (to land, or to be reverted):
# told by the landing app at start (the kernel imports no app above it, ADR 0031's seam),
# so a change of ``landing.mode`` is refused while any wait (``check_mode_change``).
_queued: Callable[[int], list[str]] | None = None
QUEUED_NAMED = 20  # the queued changes a refusal names


def register_queued(lookup: Callable[[int], list[str]]) -> None:
    """Make ``lookup(project_id)`` the one that lists the changes waiting to land."""
    global _queued
    _queued = lookup


def check_mode_change(project_id: int, was: str, mode: str) -> None:
    """Refuse (409 ``landing_queued``) a change of ``landing.mode`` while changes wait in
    the project's landing queue, naming them: under the new mode nothing would land them
    as the old one promised (turned off, they would wait for ever)."""
    if was == mode or _queued is None:
        return
    keys = _queued(project_id)
    if not keys:
        return
    named = ", ".join(keys[:QUEUED_NAMED]) + (
        f" and {len(keys) - QUEUED_NAMED} more" if len(keys) > QUEUED_NAMED else ""
    )
    raise Conflict(
        f"landing.mode cannot change from {was} to {mode} while {len(keys)} "
        f"change{'s' if len(keys) != 1 else ''} wait{'' if len(keys) != 1 else 's'} to land "
        f"or be reverted: {named}; let them land, or dequeue them, first",
        code="landing_queued",
        extra={"queued": keys[:QUEUED_NAMED]},
    )


def default_landing() -> dict:
    return dict(LANDING_DEFAULTS)


def clean_landing(value) -> dict:
    """The landing block with its defaults, or a ValidationError naming each bad field.

    ``{mode: off|push|pull_request, method: squash|merge, batch_max: 1..16, target_branch,
    quarantine_after: 0..1000, release_after: 1..1000}``; an empty ``target_branch`` means
    the project's default branch. ``{}`` is landing off.
    """
    if value in (None, {}):
        return default_landing()
    if not isinstance(value, dict):
        raise ValidationError({"landing": 'must be an object: {"mode": "push", …}'})
    unknown = sorted(set(value) - set(LANDING_DEFAULTS))
    if unknown:
        raise ValidationError({f"landing.{name}": "unknown field" for name in unknown})
    cleaned = {**LANDING_DEFAULTS, **value}
    errors = {}
    if cleaned["mode"] not in LANDING_MODES:
        errors["landing.mode"] = [f"choose one of {', '.join(LANDING_MODES)}"]
    if cleaned["method"] not in LANDING_METHODS:
        errors["landing.method"] = [f"choose one of {', '.join(LANDING_METHODS)}"]
    for name, (low, high) in LANDING_NUMBERS.items():
        number = cleaned[name]
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            errors[f"landing.{name}"] = [f"a whole number from {low} to {high}"]
    branch = cleaned["target_branch"]
    if branch != "" and not _matches(BRANCH_PATTERN, branch, MAX_BRANCH):
        errors["landing.target_branch"] = [
            "a branch name: words joined by single . / or -, like release/2.x (or empty for "
            "the default branch)"
        ]
    if errors:
        raise ValidationError(errors)
    return cleaned
