"""The docs name only what exists.

Every dotted Python name, repository path and ``FACTORY_…`` setting that README.md,
client/README.md, docs/*.md and docs/decisions/*.md cite is resolved against the code,
and a failure names the file, the line and the name that no longer exists. The rules:

- a **dotted name** is a word of the form ``a.b[.c…]`` (call arguments and ``:attr`` of an
  ASGI-style reference allowed) whose first part is one of ``PACKAGES``; it resolves when
  it is an importable module with those attributes, a model label (``events.Delivery``),
  a model's field (``evidence.Evidence.attempt``) or an event type (``runner.finished``);
- a **path** is a word with a ``/`` whose first part is a top-level entry the repository
  tracks (``factory_client/…`` is read as ``client/factory_client/…``), or a bare name
  ending in ``.py`` or ``.toml``; it resolves when it exists (a ``*`` glob when it matches
  something; at a placeholder such as ``<app>`` or ``NNNN``, when the folder before it
  exists). Markdown links resolve from the doc's own folder;
- a **setting** ``FACTORY_…`` resolves when the site's settings read it from the
  environment or the agent-side client does (``FACTORY_URL``); ``FACTORY_X_*`` when some
  setting starts with ``FACTORY_X_``.

The README's "Layout" and the diagram in docs/architecture.md list the layers in the order
of ``tests.test_layers.LAYERS``.
"""

import ast
import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.core.exceptions import FieldDoesNotExist

from events.types import TYPES
from projects import hosts
from tests.test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "client" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "decisions").glob("*.md")),
]
PACKAGES = {
    *("projects", "decisions", "evidence", "runner", "tasks", "events", "interop", "codehosts"),
    *("oversight", "demo"),
    *("factory_site", "factory_client", "proof", "bench", "tests"),
}
# Paths the docs name in other people's repositories, not in this one.
FOREIGN = {
    "docs/adr/": "a MADR log's usual folder in the repository it is imported from",
    "tests/test_albums.py": "a test selector in docs/interop.md's example spec-kit project",
}
PLACEHOLDER = re.compile(r"<[^>]*>|\{[^}]*\}|NNNN|…|\.\.\.")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
SETTING = re.compile(r"\bFACTORY_[A-Z0-9_]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
CODE = re.compile(r"`([^`]+)`")
FILE = re.compile(r"\.(py|md|toml|json|jsonl|yaml|yml|txt|html|css|tsv|xml|sh)$")


def tracked_tops() -> set[str]:
    """The repository's top-level entries: what git tracks, else what is there (an export)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        return {entry.name for entry in ROOT.iterdir() if entry.name not in {".git", ".venv"}}
    return {line.split("/")[0] for line in listed.stdout.splitlines()}


TOPS = tracked_tops() | {"factory_client"}


def lines(path: Path):
    """``(line number, text, in a fenced block)`` for each line of a Markdown file; a code
    span that runs on to the next line is closed at the line's end and opened again."""
    fenced = spanning = False
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            text = "`" + text if spanning else text
            spanning = text.count("`") % 2 == 1
            text = text + "`" if spanning else text
        yield number, text, fenced


def words(text: str, fenced: bool):
    """The words of a line that may cite code: all of a fenced line, else those in backticks
    and the prose words that start with a tracked folder."""
    if fenced:
        yield from text.split()
        return
    for span in CODE.findall(text):
        yield from span.split()
    for word in LINK.sub(" ", CODE.sub(" ", text)).split():
        word = clean(word)
        if word.split("/")[0] in TOPS and re.search(r"/$|/[^/]*\.\w+$", word):
            yield word


def clean(word: str) -> str:
    word = word.strip("\"'([,;").removesuffix("'s")
    word = word.rstrip(".,;:)]\"'")
    return word.split("::")[0]


def dotted_names(word: str) -> list[str]:
    word = word.split("(")[0].replace(":", ".")
    if DOTTED.fullmatch(word) and word.split(".")[0] in PACKAGES and not FILE.search(word):
        return [word]
    return []


def repo_path(word: str) -> str | None:
    if "://" in word or word.startswith(("/", "~", "-")) or "=" in word:
        return None
    first = word.split("/")[0]
    if "/" in word and first in TOPS:
        return "client/" + word if first == "factory_client" else word
    if "/" not in word and re.fullmatch(r"[\w.-]+\.(py|toml)", word):
        return word
    return None


def name_resolves(name: str) -> bool:
    if name in TYPES:
        return True
    parts = name.split(".")
    if len(parts) in (2, 3):
        try:
            model = apps.get_model(".".join(parts[:2]))
            return len(parts) == 2 or bool(model._meta.get_field(parts[2]))
        except (LookupError, ValueError, FieldDoesNotExist):
            pass
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            continue
        thing = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(thing, attribute):
                return False
            thing = getattr(thing, attribute)
        return True
    return False


def path_resolves(path: str, base: Path = ROOT) -> bool:
    if path in FOREIGN:
        return True
    if "/" not in path:
        return any(ROOT.rglob(path))
    placeholder = PLACEHOLDER.search(path)
    if placeholder:
        return (base / path[: placeholder.start()].rpartition("/")[0]).is_dir()
    if "*" in path:
        return any(base.glob(path.rstrip("/")))
    return (base / path).exists()


def citations(path: Path, shown_from: Path):
    """``(doc:line, "name"|"path"|"link", what it cites)`` for every citation in a doc."""
    where = path.relative_to(shown_from).as_posix()
    for number, text, fenced in lines(path):
        for word in words(text, fenced):
            word = clean(word)
            for name in dotted_names(word):
                yield f"{where}:{number}", "name", name
            if (found := repo_path(word)) is not None:
                yield f"{where}:{number}", "path", found
        if not fenced:
            for target in LINK.findall(CODE.sub(" ", text)):
                target = target.split("#")[0]
                if target and "://" not in target and not target.startswith("mailto:"):
                    yield f"{where}:{number}", "link", target


def stale(path: Path, shown_from: Path = ROOT) -> list[str]:
    resolves = {
        "name": name_resolves,
        "path": path_resolves,
        "link": lambda cited: path_resolves(cited, base=path.parent),
    }
    return [
        f"{where} {cited}"
        for where, kind, cited in citations(path, shown_from)
        if not resolves[kind](cited)
    ]


def environment_names(folder: Path) -> set[str]:
    """The ``FACTORY_…`` strings the code under ``folder`` spells out (names it reads)."""
    names = set()
    for source in [folder] if folder.is_file() else sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(re.findall(r"^FACTORY_[A-Z0-9_]+$", node.value))
    return names


# Names under this prefix are the operator's own, one per credential (projects.hosts).
ENV_PREFIX = hosts.ENV_PREFIX
SITE_ENVIRONMENT = environment_names(ROOT / "factory_site" / "settings.py")
SITE_SETTINGS = {name for name in dir(settings) if name.startswith("FACTORY_")}
AGENT_ENVIRONMENT = environment_names(ROOT / "client" / "factory_client")
KNOWN_SETTINGS = SITE_ENVIRONMENT | SITE_SETTINGS | AGENT_ENVIRONMENT


def unknown_settings(path: Path, shown_from: Path = ROOT) -> list[str]:
    where = path.relative_to(shown_from).as_posix()
    found = []
    for number, text, _ in lines(path):
        for name in SETTING.findall(text):
            if name.startswith(ENV_PREFIX):
                known = True  # a variable the operator names for a code host's credentials
            elif name.endswith("_"):
                known = any(setting.startswith(name) for setting in KNOWN_SETTINGS)
            else:
                known = name in KNOWN_SETTINGS
            if not known:
                found.append(f"{where}:{number} {name}")
    return found


def layout_order(path: Path, heading: str) -> list[str]:
    """The layers in the order the first fenced block after ``heading`` lists them."""
    text = path.read_text().split(heading, 1)[1]
    block = text.split("```", 2)[1]
    return [
        match for match in re.findall(r"^(\w+)/\s", block, flags=re.MULTILINE) if match in LAYERS
    ]


def test_every_dotted_name_and_path_the_docs_cite_exists():
    missing = [entry for doc in DOCS for entry in stale(doc)]

    assert missing == []


def test_every_factory_setting_the_docs_cite_is_read_by_the_site_or_the_client():
    missing = [entry for doc in DOCS for entry in unknown_settings(doc)]

    assert missing == []


def test_the_readme_layout_lists_the_layers_lowest_first():
    assert layout_order(ROOT / "README.md", "## Layout") == LAYERS


def test_the_architecture_diagram_lists_the_layers_highest_first():
    order = layout_order(ROOT / "docs" / "architecture.md", "# Architecture")

    assert order == LAYERS[::-1]


def test_a_stale_name_path_or_link_is_reported_with_its_file_and_line(tmp_path):
    doc = tmp_path / "docs" / "stale.md"
    doc.parent.mkdir()
    doc.write_text(
        "Fine: `tasks.attempts.task_claim`, `projects/verify.py`, [api](api.md).\n"
        "Gone: `tasks.tokens.token_issue(*, user)` and `tasks/paths.py`,\n"
        "`runner.mirror.nothing_here`, [nowhere](nowhere.md).\n"
        "Fine: `tasks.Attempt`, `evidence.Evidence.attempt`. Gone: `evidence.Evidence.task`.\n"
    )
    (doc.parent / "api.md").write_text("")

    assert stale(doc, shown_from=tmp_path) == [
        "docs/stale.md:2 tasks.tokens.token_issue",
        "docs/stale.md:2 tasks/paths.py",
        "docs/stale.md:3 runner.mirror.nothing_here",
        "docs/stale.md:3 nowhere.md",
        "docs/stale.md:4 evidence.Evidence.task",
    ]


def test_a_setting_nothing_reads_is_reported_with_its_file_and_line(tmp_path):
    doc = tmp_path / "deploy.md"
    doc.write_text(
        "Read: `FACTORY_GATES`, FACTORY_LOGIN_FAILURE_LIMIT (env only), `FACTORY_URL`,\n"
        "`FACTORY_TOKEN_MAX_DAYS_*`. Gone: `FACTORY_GATE_TIMEOUT`, FACTORY_NOTHING_*.\n"
    )

    assert unknown_settings(doc, shown_from=tmp_path) == [
        "deploy.md:2 FACTORY_GATE_TIMEOUT",
        "deploy.md:2 FACTORY_NOTHING_",
    ]
