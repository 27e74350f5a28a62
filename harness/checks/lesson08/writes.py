"""Lesson 08: watch how a save writes the files that must survive it (issue 43, item 1).

A crash raised while pickling only tests what a save does when Python sees an exception; a killed process
sees none. So the probes also watch the write itself, through an audit hook (`sys.addaudithook`): a target
opened for writing (`open(path, 'wb')`, `shutil.copyfile(..., path)`), moved aside or removed while the save
runs, a rename onto it whose source this process still holds open for writing or that comes from another
folder (a temporary file in /tmp), a rename of a file onto itself; and whether a target kept its inode while its
bytes changed (written in place, as `torch.save(obj, path)` does from C++, where no audit event is raised). The
hook records names and kinds only; the judge (`harness.judges.lesson08.writes`) decides.

An audit hook cannot be removed: one is installed per process, and records only while a `watching` block runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC


@dataclass
class _Watch:
    """The targets watched (absolute paths to their names) and the events recorded so far."""

    targets: dict[str, str]
    events: list[list[str]] = field(default_factory=list)
    # target name -> the size on disk of the file renamed onto it while still open for writing, at the rename
    sizes_at_rename: dict[str, int] = field(default_factory=dict)


_WATCHES: list[_Watch] = []
_STATE = {"installed": False, "inside": False}


def _absolute(path: Any) -> str | None:
    """An absolute, normalised path for a str/bytes/PathLike argument; None for a file descriptor."""
    if isinstance(path, int):
        return None
    try:
        return os.path.abspath(os.fsdecode(os.fspath(path)))
    except TypeError:
        return None


def _open_for_writing(path: str) -> bool:
    """Whether this process holds `path` open for writing (Linux: /proc/self/fd); False where it cannot tell."""
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(f"/proc/self/fd/{descriptor}") != path:
                continue
            with open(f"/proc/self/fdinfo/{descriptor}") as info:
                flags = next(int(line.split()[1], 8) for line in info if line.startswith("flags:"))
        except (OSError, StopIteration, ValueError):
            continue
        if flags & os.O_ACCMODE != os.O_RDONLY:
            return True
    return False


def _beside(source: str, target: str) -> bool:
    """Whether `source` lies in `target`'s folder or below it (symbolic links resolved): a rename from there stays
    on the target's file system, where one from another folder (/tmp) may become a copy into the target."""
    folder = os.path.realpath(os.path.dirname(target))
    return os.path.commonpath([folder, os.path.realpath(source)]) == folder


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(letter in mode for letter in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _record(watch: _Watch, event: str, args: tuple[Any, ...]) -> None:
    """Add what `event` did to a watched target to `watch.events`, as [kind, target name, other name]."""
    names = watch.targets
    if event == "open" and len(args) >= 3 and _writes(args[1], args[2]):
        path = _absolute(args[0])
        if path in names:
            watch.events.append(["written", names[path], ""])
    elif event == "shutil.copyfile" and len(args) >= 2:
        source, target = _absolute(args[0]), _absolute(args[1])
        if target in names:
            watch.events.append(["copied-onto", names[target], names.get(source or "", Path(source or "").name)])
    elif event == "os.rename" and len(args) >= 2:
        source, target = _absolute(args[0]), _absolute(args[1])
        if source is not None and source == target and target in names:
            watch.events.append(["renamed-onto-itself", names[target], ""])
        elif source in names:
            watch.events.append(["moved-aside", names[source], Path(target or "").name])
        elif target in names and source is not None and _open_for_writing(os.path.realpath(source)):
            watch.events.append(["renamed-while-open", names[target], Path(source).name])
            with suppress(OSError):
                watch.sizes_at_rename[names[target]] = os.stat(source).st_size
        elif target in names and source is not None and not _beside(source, target):
            watch.events.append(["renamed-from-elsewhere", names[target], source[:200]])
    elif event == "os.remove" and args:
        path = _absolute(args[0])
        if path in names:
            watch.events.append(["removed", names[path], ""])


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _WATCHES or _STATE["inside"] or event not in ("open", "shutil.copyfile", "os.rename", "os.remove"):
        return
    _STATE["inside"] = True  # the hook's own calls (listdir, open of /proc) raise audit events too
    try:
        for watch in _WATCHES:
            _record(watch, event, args)
    finally:
        _STATE["inside"] = False


def _identity(path: Path) -> tuple[int, str] | None:
    """The file's inode and a digest of its bytes (timestamps are too coarse to tell two quick writes apart);
    None when it does not exist."""
    try:
        return os.stat(path).st_ino, hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@contextmanager
def watching(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """Record what the block does to `paths`; the dict it yields is filled in when the block ends:
    {"events": [[kind, name, other], ...], "in_place": [names whose inode stayed while their bytes changed],
    "renamed_sizes": {name: [size of the file renamed onto it while open, at the rename; its size at the end]}}."""
    if not _STATE["installed"]:
        sys.addaudithook(_hook)
        _STATE["installed"] = True
    before = {path.name: _identity(path) for path in paths}
    watch = _Watch({os.path.abspath(path): path.name for path in paths})
    observed: dict[str, Any] = {"events": watch.events, "in_place": [], "renamed_sizes": {}}
    _WATCHES.append(watch)
    try:
        yield observed
    finally:
        _WATCHES.remove(watch)
        for path in paths:
            old, new = before[path.name], _identity(path)
            if old is not None and new is not None and old[0] == new[0] and old != new:
                observed["in_place"].append(path.name)
            if path.name in watch.sizes_at_rename:
                with suppress(OSError):
                    observed["renamed_sizes"][path.name] = [watch.sizes_at_rename[path.name], os.stat(path).st_size]
