"""YAML in an import is read by one loader (interop.formats.safe_yaml): no aliases, no deep
nesting, nothing but JSON data; a hostile file refuses the whole upload and keeps nothing."""

import io
import re
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from decisions.models import Decision, Spec
from interop import services
from interop.documents import Refusal
from interop.formats import madr, safe_yaml
from interop.importer import kept
from interop.models import ImportRun
from projects.models import Event
from tasks.models import Task
from tests.interop.test_import import archive

INTEROP = Path(services.__file__).parent
YAML_READ = re.compile(r"\byaml\.(?:safe_|full_|unsafe_)?load(?:_all)?\(")
BODY = "# Use a bomb\n\n## Context and Problem Statement\n\nWhy.\n"


def bomb(levels: int = 5) -> str:
    """Front matter whose aliases expand tenfold per level (10**levels strings)."""
    lines = ["status: accepted", "a0: &a0 [" + ", ".join(["lol"] * 10) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    return "---\n" + "\n".join(lines) + "\n---\n" + BODY


def rows() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Decision, Spec, Task, ImportRun, Event))


@pytest.mark.django_db
def test_an_alias_bomb_in_madr_front_matter_is_refused_naming_file_and_line(flow, api):
    data = archive({"docs/adr/0001-ok.md": BODY.encode(), "docs/adr/0002-bomb.md": bomb().encode()})
    assert len(data) < 2048
    before = rows()

    answer = api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/imports/",
        {"format": "madr", "file": SimpleUploadedFile("adr.zip", data), "dry_run": "false"},
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "yaml_alias"
    assert answer.json()["source"] == "docs/adr/0002-bomb.md:4"
    assert answer.json()["detail"] == (
        "file: docs/adr/0002-bomb.md:4: a YAML alias (*a0): aliases are not read"
    )
    assert rows() == before


def test_one_alias_is_refused_too_even_a_harmless_one():
    text = "---\nstatus: accepted\nx: &x 1\ny: *x\n---\n" + BODY

    with pytest.raises(Refusal) as refused:
        madr.parse({"docs/adr/0001-x.md": text.encode()})

    assert (refused.value.code, str(refused.value.source)) == ("yaml_alias", "docs/adr/0001-x.md:4")


def test_nesting_past_the_limit_is_refused_before_the_parser_recurses():
    text = "---\nstatus: accepted\nx: " + "[" * 20_000 + "]" * 20_000 + "\n---\n" + BODY

    with pytest.raises(Refusal) as refused:
        madr.parse({"docs/adr/0001-x.md": text.encode()})

    assert (refused.value.code, refused.value.source.line) == ("yaml_too_deep", 3)


def test_dates_binary_and_sets_are_read_as_the_json_an_import_can_keep():
    loaded = safe_yaml.load(
        "reviewed: 2024-01-02\nat: 2024-01-02 10:00:00\nblob: !!binary aGk=\n"
        "tags: !!set {a, b}\nnested: {2024-01-01: x}\n",
        path="x.md",
    )

    assert loaded == {
        "reviewed": "2024-01-02",
        "at": "2024-01-02 10:00:00",
        "blob": "aGk=",
        "tags": {"a": None, "b": None},
        "nested": {"2024-01-01": "x"},
    }
    assert kept(loaded)  # JSON, as a decision's metadata stores it


def test_a_value_the_library_cannot_build_is_unreadable_front_matter_not_a_crash():
    text = "---\nstatus: accepted\nn: " + "1" * 5000 + "\n---\n" + BODY

    parsed = madr.parse({"docs/adr/0001-x.md": text.encode()})

    assert parsed.notices[0].message.startswith("front matter is not YAML: Exceeds the limit")
    assert (parsed.decisions[0].state, parsed.decisions[0].extra) == ("proposed", {})


def test_the_loader_is_the_only_yaml_reader_in_interop():
    readers = [
        path.relative_to(INTEROP.parent).as_posix()
        for path in INTEROP.rglob("*.py")
        if YAML_READ.search(path.read_text())
    ]

    assert readers == []


@pytest.mark.django_db
def test_front_matter_with_a_date_under_a_key_of_its_own_imports_and_exports_back(flow):
    text = "---\nstatus: accepted\nreviewed: 2024-01-02\n---\n" + BODY
    data = archive({"docs/adr/0001-dated.md": text.encode()})

    run = services.import_upload(
        project=flow.project,
        actor=flow.manager,
        format="madr",
        name="a.zip",
        data=data,
        dry_run=False,
    )
    _, _, exported = services.export(project=flow.project, actor=flow.manager, format="madr")

    assert run.report["counts"]["created"] == 1
    with zipfile.ZipFile(io.BytesIO(exported)) as folder:
        assert "reviewed: '2024-01-02'\n" in folder.read(folder.namelist()[0]).decode()
