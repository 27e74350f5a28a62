"""The drills' files on disk: a private home, one writer at a time, writes that are whole or absent.

- The home (`$HARNESS_HOME/drills`, default `~/.harness/drills`) is created mode 0700 and verified on every use:
  a symbolic link, something that is not a directory, or a directory another user owns is refused
  (`UnsafeHome`), since in a shared `HARNESS_HOME` another user could otherwise plant a link that the next write
  follows. The home's files are opened without following links (O_NOFOLLOW).
- `locked(path)` holds an exclusive `fcntl.flock` on `<path>.lock` beside the file: a read-modify-write inside
  it never loses another process's update.
- `write(path, data)` writes a unique temporary file in the same folder, `fsync`s it and renames it over `path`
  (`os.replace`): a reader sees the old file or the new one, never half of one. The file it replaces is kept
  as `<path>.bak` (a hard link: no copy) when it was good, so a torn or malformed file falls back to the last
  good one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

BACKUP_SUFFIX = ".bak"


class UnsafeHome(RuntimeError):
    """The drills home, or a file in it, is not the user's alone (the message says what to do)."""


def home() -> Path:
    """The drills workspace (answers, progress, the warm checker's files), created private (0700) and verified.

    Raises:
        UnsafeHome: the folder is a link, not a folder, or another user's.
    """
    path = Path(os.environ.get("HARNESS_HOME", Path.home() / ".harness")) / "drills"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # HARNESS_HOME, private when made here
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    private_dir(path)
    return path


def private_dir(path: Path) -> None:
    """Make sure `path` is a real directory of this user's, mode 0700 (tightened when it is looser).

    Raises:
        UnsafeHome: it is a link, not a directory, or another user's.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise UnsafeHome(f"{path} is a link or not a folder ({error.strerror}): the drills keep your progress "
                         "there, so they refuse to follow it. Remove it, or set HARNESS_HOME to a folder of "
                         "your own.") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise UnsafeHome(f"{path} belongs to user id {info.st_uid}, not to you ({os.getuid()}): another user "
                             "could read or replace your progress there. Set HARNESS_HOME to a folder of your own.")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor on `path`, refusing a symbolic link in its place (UnsafeHome)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if os.path.islink(path):
            raise UnsafeHome(f"{path} is a symbolic link: refused, since writing through it would change the "
                             "file it points to. Remove the link (your progress is kept beside it as "
                             f"{path.name}{BACKUP_SUFFIX} if it was saved before).") from None
        raise error


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of the file `path` (`<path>.lock` beside it) for a read-modify-write."""
    fd = _open_nofollow(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def read(path: Path) -> bytes | None:
    """The bytes of `path`, None when it does not exist (a link in its place is refused: UnsafeHome)."""
    try:
        fd = _open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        return file.read()


def write(path: Path, data: bytes, *, backup: bool) -> None:
    """Replace `path` with `data` atomically and durably; with `backup`, the replaced file becomes `<path>.bak`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 0600, unique
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if backup and path.is_file() and not path.is_symlink():
            _keep_backup(path, f"{tmp}.bak")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def _keep_backup(path: Path, link: str) -> None:
    """Make the file now at `path` its backup, `<path>.bak` (a hard link renamed into place, else a copy)."""
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    try:
        os.link(path, link)
    except FileNotFoundError:  # replaced meanwhile by a writer that did not hold the lock: nothing to keep
        return
    except OSError:  # a file system without hard links: a copy, written the same careful way
        data = read(path)
        if data is not None:
            write(backup, data, backup=False)
        return
    os.replace(link, backup)


def set_aside(path: Path) -> Path:
    """Rename a damaged `path` to `<path>.damaged-<time>` (kept for the user to read); the new name."""
    kept = path.with_name(f"{path.name}.damaged-{dt.datetime.now():%Y%m%d-%H%M%S-%f}")
    os.replace(path, kept)
    return kept
