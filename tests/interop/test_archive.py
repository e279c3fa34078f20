"""interop.archive: what an upload is read into, and every way it is refused (no database)."""

import io
import stat
import struct
import tarfile
import tracemalloc
import zipfile

import pytest

from interop.archive import ArchiveError, read_upload, upload_name

MiB = 1024 * 1024


def zipped(entries: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def zipped_with_mode(name: str, mode: int, content: bytes = b"x") -> bytes:
    """A zip of one entry whose Unix mode (file type included) is ``mode``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo(name)
        info.create_system, info.external_attr = 3, mode << 16
        archive.writestr(info, content)
    return buffer.getvalue()


def zipped_zeros(name: str, size: int) -> bytes:
    """A deflated zip of ``size`` zero bytes, written in chunks: a bomb small on the wire."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(name, "w") as member,
    ):
        for _ in range(size // MiB):
            member.write(bytes(MiB))
    return buffer.getvalue()


def member(name: str, content: bytes = b"", kind: bytes = tarfile.REGTYPE, linkname: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, len(content)
    return info, content


def tarred(*members: tuple[tarfile.TarInfo, bytes], mode: str = "w:gz", **options) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, **options) as archive:
        for info, content in members:
            archive.addfile(info, io.BytesIO(content) if info.isfile() else None)
    return buffer.getvalue()


def refusal(data, name: str = "upload.zip", **limits) -> tuple[str, str]:
    with pytest.raises(ArchiveError) as refused:
        read_upload(name, data, **limits)
    return refused.value.code, str(refused.value)


# What is read


def test_a_zip_is_read_into_its_paths_sorted_by_path():
    data = zipped({"docs/b.md": b"B", "specs/x/spec.md": b"S", "docs/a.md": b"A"})

    files = read_upload("adrs.zip", data)

    assert files == {"docs/a.md": b"A", "docs/b.md": b"B", "specs/x/spec.md": b"S"}
    assert list(files) == ["docs/a.md", "docs/b.md", "specs/x/spec.md"]


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_a_tar_plain_or_compressed_is_known_by_its_content(mode):
    data = tarred(member("b/2.md", b"two"), member("a/1.md", b"one"), mode=mode)

    files = read_upload("upload-without-a-suffix", data)

    assert list(files.items()) == [("a/1.md", b"one"), ("b/2.md", b"two")]


def test_a_zip_is_known_by_its_content_whatever_its_name():
    assert read_upload("notes.md", zipped({"a.md": b"A"})) == {"a.md": b"A"}


def test_an_empty_zip_has_no_files():
    assert read_upload("empty.zip", zipped({})) == {}


@pytest.mark.parametrize(
    ("name", "kept_as"),
    [
        ("issues.jsonl", "issues.jsonl"),
        ("team/.beads/issues.jsonl", "issues.jsonl"),
        ("C:\\Users\\me\\ISSUES.JSONL", "ISSUES.JSONL"),
        ("0001-record.markdown", "0001-record.markdown"),
        ("openspec.yml", "openspec.yml"),
    ],
)
def test_a_plain_file_is_kept_under_its_base_name(name, kept_as):
    assert read_upload(name, b'{"id": "x"}\n') == {kept_as: b'{"id": "x"}\n'}


def test_a_text_file_of_nul_bytes_is_not_taken_for_an_empty_tar():
    assert read_upload("notes.txt", bytes(1024)) == {"notes.txt": bytes(1024)}


def test_a_file_object_is_read_from_its_start():
    upload = io.BytesIO(zipped({"docs/a.md": b"A"}))
    upload.seek(5)

    assert read_upload("adrs.zip", upload) == {"docs/a.md": b"A"}


def test_a_folder_zipped_as_itself_keeps_its_top_folder():
    data = zipped(
        {"myrepo/docs/decisions/0002-b.md": b"2", "myrepo/docs/decisions/0001-a.md": b"1"}
    )

    assert list(read_upload("myrepo.zip", data)) == [
        "myrepo/docs/decisions/0001-a.md",
        "myrepo/docs/decisions/0002-b.md",
    ]


def test_dot_slash_and_empty_parts_are_normalised():
    data = zipped({"./docs/a.md": b"A", "docs//./b.md": b"B", "docs\\c.md": b"C"})

    assert read_upload("adrs.zip", data) == {
        "docs/a.md": b"A",
        "docs/b.md": b"B",
        "docs/c.md": b"C",
    }


def test_noise_is_skipped_silently():
    data = zipped(
        {
            "docs/a.md": b"A",
            "__MACOSX/docs/._a.md": b"x",
            "docs/._b.md": b"x",
            "docs/.DS_Store": b"x",
            ".git/config": b"x",
            "myrepo/.git/objects/ab/cdef": b"x",
            "docs/.gitignore": b"kept",
        }
    )

    assert read_upload("adrs.zip", data) == {"docs/.gitignore": b"kept", "docs/a.md": b"A"}


def test_directories_are_skipped_in_a_zip_and_in_a_tar():
    in_zip = zipped({"./": b"", "docs/": b"", "docs/a.md": b"A"})
    in_tar = tarred(
        member(".", kind=tarfile.DIRTYPE),
        member("./docs", kind=tarfile.DIRTYPE),
        member("./docs/a.md", b"A"),
    )

    assert read_upload("a.zip", in_zip) == {"docs/a.md": b"A"}
    assert read_upload("a.tgz", in_tar) == {"docs/a.md": b"A"}


# What is refused: paths, links, special files, duplicates


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../outside.md", "../outside.md: a path that leaves the folder (..)"),
        ("docs/../../x.md", "docs/../../x.md: a path that leaves the folder (..)"),
        ("docs/../x.md", "docs/../x.md: a path that leaves the folder (..)"),
        ("..\\..\\x.md", "..\\..\\x.md: a path that leaves the folder (..)"),
        ("/etc/passwd", "/etc/passwd: an absolute path"),
        ("C:\\x.md", "C:\\x.md: an absolute path"),
        ("c:x.md", "c:x.md: an absolute path"),
        ("\\\\server\\share\\x.md", "\\\\server\\share\\x.md: an absolute path"),
        ("../evil/", "../evil/: a path that leaves the folder (..)"),  # a directory too
    ],
)
def test_a_path_that_leaves_the_folder_is_refused_naming_it(name, message):
    assert refusal(zipped({name: b"x"})) == ("unsafe_path", message)


def test_a_path_that_leaves_the_folder_is_refused_in_a_tar():
    assert refusal(tarred(member("../x.md", b"x")), "a.tgz") == (
        "unsafe_path",
        "../x.md: a path that leaves the folder (..)",
    )
    assert refusal(tarred(member("/etc/cron.d/x", b"x")), "a.tgz") == (
        "unsafe_path",
        "/etc/cron.d/x: an absolute path",
    )


def test_a_nul_in_a_zip_name_is_refused_though_zipfile_cuts_the_name_there():
    data = zipped({"docs/a#b.md": b"x"}).replace(b"docs/a#b.md", b"docs/a\x00b.md")

    assert refusal(data) == ("unsafe_path", "'docs/a\\x00b.md': a NUL in the name")


def test_a_tar_name_that_is_not_utf8_is_refused():
    data = tarred(member("caf\xe9.md", b"x"), format=tarfile.GNU_FORMAT, encoding="latin-1")

    assert refusal(data, "a.tgz") == ("unsafe_path", "'caf\\udce9.md': a name that is not UTF-8")


def test_links_in_a_tar_are_refused_naming_them():
    symbolic = tarred(member("docs/a.md", kind=tarfile.SYMTYPE, linkname="/etc/passwd"))
    hard = tarred(member("docs/a.md", kind=tarfile.LNKTYPE, linkname="docs/b.md"))

    assert refusal(symbolic, "a.tgz") == ("link_in_archive", "docs/a.md: a link")
    assert refusal(hard, "a.tgz") == ("link_in_archive", "docs/a.md: a link")


def test_a_symlink_in_a_zip_is_refused_naming_it():
    data = zipped_with_mode("docs/a.md", stat.S_IFLNK | 0o777, b"/etc/passwd")

    assert refusal(data) == ("link_in_archive", "docs/a.md: a symbolic link")


@pytest.mark.parametrize("kind", [tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE])
def test_a_device_or_fifo_in_a_tar_is_refused(kind):
    assert refusal(tarred(member("docs/a.md", kind=kind)), "a.tgz") == (
        "special_file",
        "docs/a.md: not a regular file",
    )


def test_a_fifo_in_a_zip_is_refused():
    data = zipped_with_mode("docs/a.md", stat.S_IFIFO | 0o644)

    assert refusal(data) == ("special_file", "docs/a.md: not a regular file")


def test_the_same_path_twice_is_refused():
    in_zip = zipped({"docs/a.md": b"1", "./docs/a.md": b"2"})
    in_tar = tarred(member("docs/a.md", b"1"), member("docs//a.md", b"2"))

    assert refusal(in_zip) == ("duplicate_path", "docs/a.md: twice in the archive")
    assert refusal(in_tar, "a.tgz") == ("duplicate_path", "docs/a.md: twice in the archive")


# What is refused: sizes


def test_a_zip_bomb_is_refused_once_it_expands_past_the_limit():
    bomb = zipped_zeros("docs/0001-bomb.md", 8 * MiB)

    assert len(bomb) < 64 * 1024  # small on the wire
    assert refusal(bomb, max_expanded=MiB) == (
        "too_large_expanded",
        "docs/0001-bomb.md: the archive expands past 1048576 bytes",
    )


def test_a_zip_bomb_is_read_no_further_than_the_limit():
    bomb = zipped_zeros("docs/0001-bomb.md", 64 * MiB)

    tracemalloc.start()
    try:
        assert refusal(bomb, max_expanded=MiB)[0] == "too_large_expanded"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 4 * MiB  # a sixteenth of what the member holds


def test_a_zip_whose_headers_understate_a_size_gives_no_more_and_is_refused():
    data = bytearray(zipped_zeros("docs/bomb.md", 8 * MiB))
    # Declare 10 bytes, in the local header and in the central directory alike.
    for header, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = data.index(header) + size_at
        data[start : start + 4] = (10).to_bytes(4, "little")

    # zipfile yields no more than the header's word, then finds the CRC wrong: refused
    # without the 8 MiB ever being produced.
    assert refusal(bytes(data), max_expanded=1024) == (
        "bad_archive",
        "docs/bomb.md: not readable in the zip: Bad CRC-32 for file 'docs/bomb.md'",
    )


def test_a_tar_gz_bomb_whose_gzip_trailer_lies_is_refused_as_it_expands():
    data = bytearray(tarred(member("docs/bomb.md", bytes(8 * MiB))))
    data[-4:] = (100).to_bytes(4, "little")  # ISIZE: what `gzip -l` would believe

    assert len(data) < 64 * 1024
    assert refusal(bytes(data), "a.tgz", max_expanded=MiB) == (
        "too_large_expanded",
        "docs/bomb.md: the archive expands past 1048576 bytes",
    )


def test_a_tar_of_empty_entries_counts_its_headers_as_expansion():
    directories = [member(f"d{n}", kind=tarfile.DIRTYPE) for n in range(3000)]

    assert refusal(tarred(*directories), "a.tgz", max_expanded=MiB) == (
        "too_large_expanded",
        "a.tgz: the archive expands past 1048576 bytes",
    )


def test_a_zip_entry_compressed_with_bzip2_is_refused_before_it_is_decompressed():
    # zipfile inflates a bzip2 entry a whole compressed chunk at a time, past any counting.
    data = zipped({"docs/a.md": b"x" * 100}, method=zipfile.ZIP_BZIP2)

    assert refusal(data) == (
        "unsupported_upload",
        "docs/a.md: compressed with bzip2; only stored and deflated entries are read",
    )


def test_an_encrypted_zip_entry_is_refused():
    data = bytearray(zipped({"docs/a.md": b"x"}))
    for header, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.index(header) + flags] |= 0x1

    assert refusal(bytes(data)) == ("unsupported_upload", "docs/a.md: encrypted")


def test_too_many_files_is_refused_and_noise_does_not_count():
    many = zipped({f"docs/{n}.md": b"x" for n in range(4)})
    three = zipped({"a.md": b"", "b.md": b"", "c.md": b"", ".DS_Store": b"", "docs/": b""})

    assert refusal(many, max_files=3) == ("too_many_files", "docs/3.md: more than 3 files")
    assert list(read_upload("a.zip", three, max_files=3)) == ["a.md", "b.md", "c.md"]


def no_zipfile(monkeypatch) -> None:
    """Make any use of zipfile.ZipFile fail: a refusal must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("zipfile.ZipFile was handed the upload")

    monkeypatch.setattr(zipfile, "ZipFile", refuse)


def end_record(entries: int, size: int = 0, offset: int = 0) -> bytes:
    return struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, size, offset, 0)


def test_a_zip_listing_more_entries_than_allowed_is_refused_before_zipfile_reads_it(
    monkeypatch,
):
    empty_entries = zipped({f"d/{n}": b"" for n in range(13)}, zipfile.ZIP_STORED)
    no_zipfile(monkeypatch)

    assert refusal(empty_entries, max_files=3) == (
        "too_many_files",
        "upload.zip: the zip lists 13 entries; the limit is 12",
    )


def test_the_end_records_count_alone_refuses_a_zip_before_zipfile_sees_it(monkeypatch):
    no_zipfile(monkeypatch)

    assert refusal(end_record(60_000), max_files=20) == (
        "too_many_files",
        "upload.zip: the zip lists 60000 entries; the limit is 80",
    )


def test_a_zip64_end_record_is_read_for_its_count(monkeypatch):
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 10**9, 10**9, 0, 0)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 1)
    no_zipfile(monkeypatch)

    assert refusal(record + locator + end_record(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)) == (
        "too_many_files",
        "upload.zip: the zip lists 1000000000 entries; the limit is 80000",
    )


def test_an_end_record_that_understates_its_count_is_walked_and_refused(monkeypatch):
    data = bytearray(zipped({f"d/{n}": b"" for n in range(13)}, zipfile.ZIP_STORED))
    end = data.rindex(b"PK\x05\x06")
    data[end + 8 : end + 12] = struct.pack("<2H", 1, 1)  # "one entry"
    no_zipfile(monkeypatch)

    assert refusal(bytes(data), max_files=3) == (
        "too_many_files",
        "upload.zip: the zip lists more than 12 entries",
    )


def test_too_large_an_upload_is_refused_as_bytes_or_as_a_file():
    data = zipped({"docs/a.md": b"x"})

    assert read_upload("a.zip", data, max_bytes=len(data)) == {"docs/a.md": b"x"}
    assert refusal(data, max_bytes=len(data) - 1) == (
        "too_large",
        f"the upload is {len(data)} bytes; the limit is {len(data) - 1}",
    )
    assert refusal(io.BytesIO(data), max_bytes=10) == (
        "too_large",
        "the upload is more than 10 bytes; the limit is 10",
    )


def test_the_limits_default_to_the_settings(settings):
    settings.FACTORY_IMPORT_MAX_FILES = 1
    assert refusal(zipped({"a.md": b"", "b.md": b""})) == (
        "too_many_files",
        "b.md: more than 1 files",
    )

    settings.FACTORY_IMPORT_MAX_EXPANDED_BYTES = 5
    assert refusal(b"123456", "a.md") == (
        "too_large_expanded",
        "a.md: the archive expands past 5 bytes",
    )

    settings.FACTORY_IMPORT_MAX_BYTES = 4
    assert refusal(b"12345", "a.md") == ("too_large", "the upload is 5 bytes; the limit is 4")


# What is refused: not an archive, or a broken one


def test_a_corrupt_zip_is_refused_with_the_library_reason():
    corrupt = zipped({"docs/a.md": b"x" * 100})[:-30]  # the central directory cut off

    assert refusal(corrupt) == (
        "bad_archive",
        "upload.zip: not a readable zip: File is not a zip file",
    )


def test_a_corrupt_tar_gz_is_refused_with_the_library_reason():
    data = tarred(member("docs/a.md", b"x" * 50_000))

    assert refusal(data[: len(data) // 2], "a.tgz") == (
        "bad_archive",
        "a.tgz: not a readable tar: Compressed file ended before the end-of-stream marker was reached",
    )
    # Only the gzip trailer is cut: the tar inside is whole, the stream's end is checked too.
    assert refusal(data[:-4], "a.tgz")[0] == "bad_archive"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("team.zip", "team.zip: not a readable zip: File is not a zip file"),
        ("team.tar.gz", "team.tar.gz: not a readable tar: Not a gzipped file (b'# ')"),
        ("team.tar", "team.tar: not a readable tar: truncated header"),
    ],
)
def test_a_file_named_as_an_archive_that_is_not_one_is_refused(name, message):
    assert refusal(b"# Not an archive\n", name) == ("bad_archive", message)


def test_an_unsupported_plain_file_is_refused():
    assert refusal(b"\x7fELF...", "tool.bin") == (
        "unsupported_upload",
        "tool.bin: not a zip or tar archive, nor a .jsonl, .json, .md or .yaml file",
    )


@pytest.mark.parametrize(
    ("name", "media_type", "read_as"),
    [
        ("file", "application/x-ndjson", "file.jsonl"),
        ("file", "text/markdown; charset=utf-8", "file.md"),
        ("file", "application/gzip", "file.tar.gz"),
        ("issues.jsonl", "application/zip", "issues.jsonl"),  # the name says it already
        ("a.ZIP", "text/plain", "a.ZIP"),
        ("file", "application/octet-stream", "file"),  # says nothing: the content decides
    ],
)
def test_an_upload_is_named_for_the_kind_its_media_type_declares(name, media_type, read_as):
    assert upload_name(name, media_type) == read_as
