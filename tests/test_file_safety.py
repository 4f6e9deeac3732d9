"""keras_transformer.file_safety: atomic writes, staged directories, confined paths."""

from __future__ import annotations

import os

import pytest

from keras_transformer.file_safety import (
    UnsafePath,
    atomic_write_text,
    check_input_file,
    recover_directory,
    resolve_inside,
    staged_directory,
)


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_outputs_get_the_permissions_of_any_file_the_user_writes(tmp_path):
    """mkstemp's 0600 and mkdtemp's 0700 are not left on an output: a new file gets what
    open() would give it under the umask, a replaced one keeps its own mode."""
    old_mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.json", "{}")
        (tmp_path / "plain").write_text("x")
        (tmp_path / "plain_dir").mkdir()
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o604)
        atomic_write_text(kept, "new")
        with staged_directory(tmp_path / "export") as staging:
            (staging / "a").write_text("a")
        (tmp_path / "shared").mkdir(mode=0o775)
        (tmp_path / "shared").chmod(0o775)  # mkdir's mode is under the umask too
        with staged_directory(tmp_path / "shared") as staging:
            (staging / "a").write_text("a")
    finally:
        os.umask(old_mask)

    def mode(name):
        return (tmp_path / name).stat().st_mode & 0o777

    assert mode("new.json") == mode("plain") == 0o640
    assert mode("kept.json") == 0o604
    assert mode("export") == mode("plain_dir") == 0o750
    assert mode("shared") == 0o775


def test_staged_directory_swaps_on_success(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with staged_directory(final) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".out.")
        (staging / "new.txt").write_text("new")
        assert (final / "old.txt").read_text() == "old"  # untouched while staging
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staged_directory_replaces_only_what_the_command_made(tmp_path):
    """The entries named in `keep` (the user's) are carried into the new directory as they
    were, a file, a directory and a symlink; one the command writes itself is its own."""
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    (final / "notes.txt").write_text("mine")
    (final / "dir").mkdir()
    (final / "dir" / "a.bin").write_bytes(b"\x00a")
    os.symlink("notes.txt", final / "link")
    (final / "same.txt").write_text("user's")
    keep = ["notes.txt", "dir", "link", "same.txt", "gone.txt"]
    with staged_directory(final, keep) as staging:
        (staging / "new.txt").write_text("new")
        (staging / "same.txt").write_text("command's")
    assert sorted(p.name for p in final.iterdir()) == ["dir", "link", "new.txt", "notes.txt",
                                                       "same.txt"]
    assert (final / "notes.txt").read_text() == "mine"
    assert (final / "dir" / "a.bin").read_bytes() == b"\x00a"
    assert os.readlink(final / "link") == "notes.txt"
    assert (final / "same.txt").read_text() == "command's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # A failure leaves the previous directory whole, the kept entries with it.
    with pytest.raises(RuntimeError), staged_directory(final, keep) as staging:
        raise RuntimeError("failed")
    assert (final / "notes.txt").read_text() == "mine" and (final / "new.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_check_input_file_takes_pipes_and_names_the_option(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert check_input_file(fifo, "--src") == fifo
    read, write = os.pipe()
    try:  # what a shell's <(...) passes
        assert check_input_file(f"/dev/fd/{read}", "--src").name == str(read)
    finally:
        os.close(read)
        os.close(write)
    with pytest.raises(FileNotFoundError, match=r"^--src .*absent: file not found$"):
        check_input_file(tmp_path / "absent", "--src")
    with pytest.raises(IsADirectoryError, match="--ref .* is a directory"):
        check_input_file(tmp_path, "--ref")
    with pytest.raises(FileNotFoundError, match="^config file not found: "):
        check_input_file(tmp_path / "absent", "config file")


def test_staged_directory_keeps_previous_output_on_failure(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_directory(final) as staging:
        (staging / "half.txt").write_text("x")
        raise RuntimeError("export failed")
    assert sorted(p.name for p in final.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_interrupted_swap_is_recovered(tmp_path):
    # A kill between the two renames leaves only the hidden previous copy.
    final, backup = tmp_path / "out", tmp_path / ".out.previous"
    backup.mkdir()
    (backup / "old.txt").write_text("old")
    recover_directory(final)
    assert (final / "old.txt").read_text() == "old" and not backup.exists()


def test_staging_of_a_killed_command_is_removed_by_the_next(tmp_path):
    import fcntl
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f".out.{dead}.abc.staging"
    live = tmp_path / f".out.{dead}.def.staging"  # a command still at work (its lock): kept
    # A killed command whose process id now belongs to a live process (ids are reused):
    # no one holds its lock, so it is removed all the same.
    reused = tmp_path / f".out.{os.getpid()}.jkl.staging"
    other = tmp_path / f".out.v2.{dead}.ghi.staging"  # the staging of "out.v2": not ours
    for path in (stale, live, reused, other):
        path.mkdir()
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with staged_directory(tmp_path / "out") as staging:
            assert staging.name.startswith(f".out.{os.getpid()}.")
            (staging / "new.txt").write_text("new")
            # Another command's recovery meanwhile leaves this one's staging alone.
            recover_directory(tmp_path / "out")
            assert staging.is_dir()
    finally:
        os.close(holder)
    assert not stale.exists() and not reused.exists() and live.is_dir() and other.is_dir()
    assert (tmp_path / "out" / "new.txt").read_text() == "new"


@pytest.mark.parametrize("relative", ["/etc/passwd", "../x", "a/../../x", "C:\\x", "..\\x", ""])
def test_resolve_inside_refuses_paths_that_leave(tmp_path, relative):
    with pytest.raises(UnsafePath):
        resolve_inside(tmp_path, relative, source="manifest.json")


def test_resolve_inside_refuses_symlinks_out_and_directories(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", root / "link")
    with pytest.raises(UnsafePath, match="symlink"):
        resolve_inside(root, "link")
    with pytest.raises(UnsafePath, match="directory"):
        resolve_inside(root, "sub")
    (root / "sub" / "f").write_text("ok")
    assert resolve_inside(root, "sub/f") == root / "sub" / "f"


def test_check_output_file_refuses_what_must_not_be_written(tmp_path):
    from keras_transformer.file_safety import check_output_file

    src = tmp_path / "in.txt"
    src.write_text("x")
    assert check_output_file(tmp_path / "out.txt", "-o", inputs={"input": src}) == \
        tmp_path / "out.txt"
    with pytest.raises(IsADirectoryError, match="-o .* is a directory"):
        check_output_file(tmp_path, "-o")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_output_file(tmp_path / "missing" / "out.txt", "-o")
    with pytest.raises(ValueError, match="is the --src file"):
        check_output_file(tmp_path / "." / "in.txt", "--hyp", inputs={"--src": src, "--ref": None})


def test_written_in_place_of_replaces_only_on_success(tmp_path):
    from keras_transformer.file_safety import written_in_place_of

    path = tmp_path / "epoch_0001.npz"
    path.write_text("old")
    with written_in_place_of(path, ".npz") as tmp:
        # Hidden, so a glob of the real files (epoch_*.npz) never counts it.
        assert tmp.name.startswith(".") and tmp.suffix == ".npz"
        tmp.write_text("new")
    assert path.read_text() == "new"
    with pytest.raises(RuntimeError), written_in_place_of(path, ".npz") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_0001.npz"]
