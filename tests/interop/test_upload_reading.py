"""Reading an upload to import (interop.archive): what it takes, and what it refuses."""

import io
import os
import tarfile
import zipfile

import pytest

from interop.archive import ArchiveError, read_upload


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def tarred(*members: tarfile.TarInfo, contents: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member in members:
            data = (contents or {}).get(member.name)
            member.size = len(data) if data is not None else 0
            archive.addfile(member, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def entry(name: str, kind=tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def refusal(data: bytes, name: str = "upload.zip", **limits) -> tuple[str, str]:
    with pytest.raises(ArchiveError) as refused:
        read_upload(name, data, **limits)
    return refused.value.code, str(refused.value)


def test_a_zip_is_read_by_path_sorted_and_without_noise():
    data = zipped(
        {
            "./docs/b.md": b"B",
            "docs/a.md": b"A",
            "__MACOSX/docs/._a.md": b"x",
            "docs/._b.md": b"x",
            "docs/.DS_Store": b"x",
            ".git/config": b"x",
        }
    )

    assert read_upload("adrs.zip", data) == {"docs/a.md": b"A", "docs/b.md": b"B"}


def test_a_tar_gz_and_a_plain_jsonl_are_read():
    data = tarred(entry(".beads/issues.jsonl"), contents={".beads/issues.jsonl": b"{}\n"})

    assert read_upload("b.tgz", data) == {".beads/issues.jsonl": b"{}\n"}
    assert read_upload("dir/issues.jsonl", b"{}\n") == {"issues.jsonl": b"{}\n"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../outside.md", "../outside.md: a path that leaves the folder (..)"),
        ("docs/../../x.md", "docs/../../x.md: a path that leaves the folder (..)"),
        ("/etc/passwd", "/etc/passwd: an absolute path"),
        ("C:\\x.md", "C:\\x.md: an absolute path"),
    ],
)
def test_a_path_that_leaves_the_folder_is_refused_naming_it(name, message):
    assert refusal(zipped({name: b"x"})) == ("unsafe_path", message)


def test_links_and_devices_in_a_tar_are_refused():
    link = tarred(entry("docs/a.md", tarfile.SYMTYPE, "/etc/passwd"))
    hard = tarred(entry("docs/a.md", tarfile.LNKTYPE, "other"))
    fifo = tarred(entry("docs/a.md", tarfile.FIFOTYPE))

    assert refusal(link, "a.tgz") == ("link_in_archive", "docs/a.md: a link")
    assert refusal(hard, "a.tgz") == ("link_in_archive", "docs/a.md: a link")
    assert refusal(fifo, "a.tgz") == ("special_file", "docs/a.md: not a regular file")


def test_a_symlink_in_a_zip_is_refused():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("docs/a.md")
        info.external_attr = 0o120777 << 16
        archive.writestr(info, "/etc/passwd")

    assert refusal(buffer.getvalue()) == ("link_in_archive", "docs/a.md: a symbolic link")


def test_the_same_path_twice_is_refused():
    data = zipped({"docs/a.md": b"1", "./docs/a.md": b"2"})

    assert refusal(data) == ("duplicate_path", "docs/a.md: twice in the archive")


def test_a_zip_bomb_stops_as_soon_as_it_expands_past_the_limit():
    bomb = zipped({"docs/0001-bomb.md": b"0" * (8 * 1024 * 1024)})

    code, message = refusal(bomb, max_expanded=1024 * 1024)

    assert len(bomb) < 64 * 1024  # small on the wire
    assert (code, message) == (
        "too_large_expanded",
        "docs/0001-bomb.md: the archive expands past 1048576 bytes",
    )


def test_a_zip_whose_headers_lie_about_the_size_is_not_read_past_its_word():
    data = bytearray(zipped({"docs/a.md": os.urandom(4096)}))
    # Declare 10 bytes in the central directory: the reader must count what it really reads.
    central = data.rindex(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")

    assert refusal(bytes(data), max_expanded=1024) == (
        "bad_archive",
        "not a readable zip: Bad CRC-32 for file 'docs/a.md'",
    )


def test_too_many_files_and_too_large_an_upload_are_refused():
    many = zipped({f"docs/{n}.md": b"x" for n in range(4)})

    assert refusal(many, max_files=3) == ("too_many_files", "docs/3.md: more than 3 files")
    assert refusal(many, max_bytes=10)[0] == "too_large"


def test_corrupt_and_unsupported_uploads_are_refused():
    corrupt = zipped({"docs/a.md": b"x" * 100})[:-30]  # the central directory cut off

    assert refusal(corrupt) == ("bad_archive", "upload.zip: not a readable zip or tar archive")
    assert refusal(b"\x7fELF...", "tool.bin") == (
        "unsupported_upload",
        "tool.bin: not a zip or tar archive, nor a .jsonl, .json, .md or .yaml file",
    )
