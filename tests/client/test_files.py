"""factory_client.files: a file the agent-side tools write or read is never reached
through a link; each case runs with descriptors (O_NOFOLLOW, dir_fd) and with the
lstat checks used where the platform has no O_NOFOLLOW (Windows)."""

import os

import pytest
from factory_client import files

KEPT = "ssh-ed25519 AAAA owner\n"


@pytest.fixture(params=["by descriptor", "by lstat"])
def mode(request, monkeypatch):
    monkeypatch.setattr(files, "BY_DESCRIPTOR", request.param == "by descriptor")
    return request.param


@pytest.fixture
def world(tmp_path):
    """A workspace, and a file outside it that a link could lead to."""
    (tmp_path / "work").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "authorized_keys").write_text(KEPT)
    return tmp_path / "work", tmp_path / "outside" / "authorized_keys"


def test_a_file_link_is_neither_written_nor_read(mode, world):
    root, target = world
    (root / ".factory").mkdir()
    (root / ".factory" / "brief.md").symlink_to(target)

    with pytest.raises(files.UnsafePath, match=r"^\.factory/brief\.md is a link; links are not"):
        files.write_file(root, ".factory/brief.md", "the brief")
    with pytest.raises(files.UnsafePath, match=r"^\.factory/brief\.md is a link"):
        files.read_file(root, ".factory/brief.md")
    assert target.read_text() == KEPT


def test_a_directory_link_on_the_way_is_refused_naming_it(mode, world):
    root, target = world
    (root / ".factory").symlink_to(target.parent)

    with pytest.raises(files.UnsafePath, match=r"^\.factory is a link") as refused:
        files.write_file(root, ".factory/authorized_keys", "the brief")
    with pytest.raises(files.UnsafePath, match=r"^\.factory is a link"):
        files.make_dirs(root, ".factory/logs")
    assert refused.value.path == ".factory"
    assert (target.read_text(), sorted(os.listdir(target.parent))) == (KEPT, ["authorized_keys"])


def test_a_hard_link_is_refused_and_not_truncated(mode, world):
    root, target = world
    os.link(target, root / "summary.md")

    with pytest.raises(files.UnsafePath, match=r"^summary\.md has another name \(a hard link\)"):
        files.write_file(root, "summary.md", "x")
    with pytest.raises(files.UnsafePath, match=r"^summary\.md has another name"):
        files.read_file(root, "summary.md")
    assert target.read_text() == KEPT


def test_a_fifo_is_refused_without_waiting_for_a_writer(mode, world):
    root, _ = world
    os.mkfifo(root / "summary.md")

    with pytest.raises(files.UnsafePath, match=r"^summary\.md is not a regular file"):
        files.read_file(root, "summary.md")


@pytest.mark.parametrize("relative", ["../outside/authorized_keys", "/etc/passwd", "a/../../x", ""])
def test_a_path_that_leaves_the_directory_is_refused(mode, world, relative):
    root, target = world

    with pytest.raises(files.UnsafePath, match="is not a plain path inside the directory"):
        files.write_file(root, relative, "x")
    assert target.read_text() == KEPT


def test_files_and_folders_are_written_and_read_when_no_link_is_there(mode, world):
    root, _ = world
    (root / "old.md").write_text("a longer text than the new one")

    files.write_file(root, ".factory/logs/run.log", "started\n")
    files.write_file(root, "old.md", "short")

    assert files.read_file(root, ".factory/logs/run.log") == b"started\n"
    assert files.read_file(root, "old.md") == b"short"
    assert files.read_file(root, ".factory/missing.md") is None
    assert files.read_file(root, "nowhere/missing.md") is None
