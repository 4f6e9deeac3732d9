"""The rules every command follows for the files it writes and the paths it reads.

- Writes are atomic: a file is written under a temporary name beside it and renamed into
  place; a directory is filled as a hidden sibling (named after the process) and swapped
  in, with the entries of the old one that the command did not make carried over. An
  interrupted or failed command leaves the previous good output as it was; the staging
  directory of a killed command is removed by the next one writing there.
- A path read from a file the program wrote earlier (an export's manifest, a backup's state)
  is resolved inside its directory: absolute paths, `..`, symlinks that leave the directory
  and directories where a file is expected are refused.

Standard library only (the TensorFlow-free tools use it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath

try:
    import fcntl
except ImportError:  # Windows: staging directories are matched by process id alone
    fcntl = None


class UnsafePath(ValueError):
    """A path from a file would leave its directory, or is not the kind of entry expected."""


def _umask() -> int:
    try:  # Linux says it without changing it (os.umask can only be read by setting it)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def usual_mode(path: Path, directory: bool = False) -> int:
    """The permissions a plain open() or mkdir() would give `path` (0o666 or 0o777 less the
    umask), or those `path` has if it exists: what a file written through a temporary one
    (mkstemp, mkdtemp: 0600, 0700) must get before it takes `path`'s place, so that others
    may read the output as they could any file the user writes."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    return (0o777 if directory else 0o666) & ~_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename, so
    that readers (and a kill) see the old content or the new one, never a mix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, usual_mode(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def written_in_place_of(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """For writers that take a file name (Keras, NumPy): yield a hidden temporary name beside
    `path`, ending in `suffix` where the writer insists on one; when the block ends normally
    the file written there replaces `path`, and in any case the temporary name is gone."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_input_file(path: str | Path, what: str = "file") -> Path:
    """An input a command reads whole, named by `what` ("--src", "config file") when it is
    missing or a directory. Anything else is read: a regular file, and also what shell users
    pass for one, a FIFO, /dev/stdin or a `<(...)` process substitution (/dev/fd/N), which a
    check for a regular file would call missing. Such an input can be read only once."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a directory; give a file")
    if not path.exists():
        raise FileNotFoundError(f"{what} {path}: file not found" if what.startswith("-")
                                else f"{what} not found: {path}")
    return path


def check_output_file(path: str | Path, flag: str, *,
                      inputs: dict[str, str | Path | None] | None = None) -> Path:
    """The output file a command was given with `flag`, refused before any work when it cannot
    or must not be written: a directory, a file in a missing directory, or one of the command's
    own `inputs` ({name: path}, e.g. {"--src": ...})."""
    out = Path(path)
    if out.is_dir():
        raise IsADirectoryError(f"{flag} {out} is a directory; give a file name")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{flag} {out}: directory {out.parent} does not exist")
    for name, other in (inputs or {}).items():
        if other is not None and Path(other).exists() \
                and out.resolve() == Path(other).resolve():
            raise ValueError(f"{flag} {out} is the {name} file; give another name")
    return out


def _backup_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.previous")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, owned by someone else
        return True
    return True


def _hold(directory: Path) -> int | None:
    """A descriptor of `directory` holding an exclusive flock on it, or None when another
    process holds one (or the platform has no flock). The lock dies with its process: a
    staging directory whose lock can be taken belongs to no running command, whatever
    process now has its (reusable) process id."""
    if fcntl is None:
        return None
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _abandoned(staging: Path, pid: str) -> bool:
    """Whether a staging directory's command is gone: its lock is free (where locks exist),
    else its process id names no process."""
    if not pid.isdigit():  # the staging of another name (".out.v2.<pid>." for "out.v2")
        return False
    if fcntl is None:
        return not _alive(int(pid))
    fd = _hold(staging)
    if fd is None:
        return False
    os.close(fd)
    return True


def recover_directory(final: str | Path) -> None:
    """Put back the previous copy of `final` if a swap was interrupted between its renames,
    and remove the staging directories of killed commands (no live process holds their
    lock)."""
    final = Path(final)
    backup = _backup_name(final)
    if backup.is_dir() and not final.exists():
        os.replace(backup, final)
    elif backup.is_dir():
        shutil.rmtree(backup)
    prefix = f".{final.name}."
    for stale in final.parent.glob(f"{glob.escape(prefix)}*.staging"):
        pid = stale.name[len(prefix):].split(".", 1)[0]
        if stale.is_dir() and not stale.is_symlink() and _abandoned(stale, pid):
            shutil.rmtree(stale, ignore_errors=True)


def _link_or_copy(source: str | Path, target: str | Path) -> None:
    try:
        os.link(source, target)  # the same file under a second name: nothing is copied
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def _carry(source: Path, target: Path) -> None:
    """Put `source` (a file, a directory or a symlink, as it is) at `target` too."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(source, target)


@contextlib.contextmanager
def staged_directory(final: str | Path, keep: Iterable[str] = ()) -> Iterator[Path]:
    """Yield an empty hidden directory beside `final` to fill. When the block ends normally it
    takes `final`'s place (the previous `final`, if any, is removed only after that); when
    the block raises, it is deleted and `final` is untouched.

    `keep` names entries of `final` that the command did not make: before the swap each is
    carried into the new directory (hard-linked where the file system allows, else copied),
    unless the block wrote an entry of that name, so that replacing a directory replaces only
    what the command made."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}.", suffix=".staging",
                                    dir=final.parent))
    os.chmod(staging, usual_mode(final, directory=True))
    lock = _hold(staging)  # held while this command fills it (see recover_directory)
    try:
        try:
            yield staging
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            for name in keep:
                source, target = final / name, staging / name
                if (source.exists() or source.is_symlink()) and not (
                        target.exists() or target.is_symlink()):
                    _carry(source, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        backup = _backup_name(final)
        if final.exists():
            os.replace(final, backup)
        os.replace(staging, final)
        if backup.exists():
            shutil.rmtree(backup)
    finally:
        if lock is not None:
            os.close(lock)


def resolve_inside(root: str | Path, relative: str, *, what: str = "file",
                   source: str = "") -> Path:
    """`root / relative` for a path read from a file (named by `source` in errors), refusing
    anything that would leave `root`: absolute paths, drive letters, `..`, symlinks out.
    `what="file"` also refuses a directory (a directory would be read whole)."""
    root = Path(root)
    where = f" in {source}" if source else ""
    if not isinstance(relative, str) or not relative:
        raise UnsafePath(f"empty or non-text path {relative!r}{where}")
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or windows.is_absolute() or windows.drive:
        raise UnsafePath(f"absolute path {relative!r}{where}: paths must be relative to "
                         f"{root}")
    if ".." in posix.parts or ".." in windows.parts:
        raise UnsafePath(f"path {relative!r}{where} leaves {root} (it contains '..')")
    path = root / posix
    resolved, resolved_root = path.resolve(), root.resolve()
    if not resolved.is_relative_to(resolved_root):
        raise UnsafePath(f"path {relative!r}{where} leads outside {root} (through a symlink)")
    if what == "file" and path.is_dir():
        raise UnsafePath(f"{relative!r}{where} is a directory, not a file")
    return path
