"""An upload's origin name (interop.origins): what it may be, and what it is when not given."""

import pytest

from interop.origins import default_origin_name, origin, valid_origin_name


@pytest.mark.parametrize(
    ("file_name", "name"),
    [
        ("service-a.zip", "service-a"),
        ("service-a.tar.gz", "service-a"),
        ("service-a.tgz", "service-a"),
        ("issues.jsonl", "issues"),
        ("v1.2.zip", "v1.2"),
        ("notes.v2", "notes.v2"),
        ("C:\\fakepath\\My Repo (1).zip", "My-Repo-1"),
        ("repos/service-b.zip", "service-b"),
        ("décisions.zip", "decisions"),
        (".beads.zip", "beads"),
        ("日本.zip", "upload"),
        ("", "upload"),
        ("x" * 100 + ".zip", "x" * 64),
    ],
)
def test_an_upload_without_a_name_is_named_after_its_file_less_its_extension(file_name, name):
    assert default_origin_name(file_name) == name
    assert valid_origin_name(default_origin_name(file_name))


def test_an_origin_holds_the_format_the_name_and_the_items_own_id():
    assert origin("madr", "service-a", "docs/decisions/0013") == (
        "madr:service-a:docs/decisions/0013"
    )
    assert len(origin("beads", "x" * 64, "y" * 400)) == 300
