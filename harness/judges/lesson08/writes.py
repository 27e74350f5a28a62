"""Lesson 08: decide from what `harness.checks.lesson08.writes` saw a save do to the files that must survive.

Each kind of write names its own cause; the first one seen, in the order below, is the one reported. A file
written in place survives a Python exception raised while pickling (the check's simulated crash) when an
`except` block repairs it, but not a kill: these observations are what tells it apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.contract.compare import malformed
from harness.contract.failure import fail
from harness.contract.wire import describe


@dataclass(frozen=True)
class _Verdict:
    """What a kind of write was seen doing, why a kill then loses the file, and what to do instead."""

    observed: str
    cause: str
    where: str


_TEMPORARY = "write to a temporary file in the same folder, close it, then os.replace it onto the path"


def _verdict(kind: str, name: str, other: str) -> _Verdict:
    """The message for one recorded event: `name` the target, `other` the other file the event names."""
    if kind == "renamed-onto-itself":
        return _Verdict(f"os.replace was called with {name} as both source and target",
                        f"os.replace(path, path) renames the file onto itself, which does nothing: {name} had already "
                        "been written in place by what ran before it, and a kill during that write truncates it",
                        _TEMPORARY)
    if kind == "renamed-while-open":
        return _Verdict(f"{other} was renamed onto {name} while this process still held it open for writing",
                        "os.replace inside the `with open(...)` block: the file becomes the checkpoint before it is "
                        "closed, and whatever is written or flushed after the rename lands in the live file",
                        "call os.replace after the with block, once the temporary file is closed")
    if kind == "moved-aside":
        return _Verdict(f"{name} was moved aside (to {other or 'another name'}) while the save ran",
                        f"the old file is renamed away before the new one is complete: a process killed in between "
                        f"leaves no {name} at all, and torch.save then writes straight onto the path",
                        f"leave the old {name} in place; {_TEMPORARY}")
    if kind == "removed":
        return _Verdict(f"{name} was removed while the save ran",
                        f"the old file is deleted before the new one is complete: a process killed in between "
                        f"leaves no {name} at all",
                        f"do not remove {name}; {_TEMPORARY}")
    if kind == "copied-onto" and other.endswith(".pt") and other != name:
        return _Verdict(f"{name} was written by copying {other} onto it (shutil.copyfile)",
                        f"a copy writes into {name} itself, byte by byte: a process killed half way leaves a "
                        f"truncated {name}",
                        f"copy {other} to a temporary name and os.replace it onto {name}, or save the state to "
                        f"{name} with atomic_save")
    if kind == "copied-onto":
        return _Verdict(f"shutil.copyfile wrote the finished file into {name}",
                        f"a copy writes into {name} itself, byte by byte: a process killed half way leaves a "
                        "truncated file, and the old one is already gone",
                        "os.replace the finished temporary file onto the path instead of copying it")
    if kind == "renamed-from-elsewhere":
        return _Verdict(f"{name} was replaced by renaming {other} onto it, a file outside {name}'s folder",
                        f"the temporary file is not in {name}'s folder: where that folder is on another file system "
                        f"than {other} (a mounted drive, /tmp in memory), the move is a copy into {name} itself, byte "
                        "by byte, not a rename, so a kill half way leaves a truncated file (and a failed save leaves "
                        "the temporary file behind, outside the folder)",
                        "make the temporary file next to the path: path.with_name(path.name + '.tmp'), or "
                        "tempfile.mkstemp(dir=path.parent)")
    if kind == "written":
        return _Verdict(f"{name} itself was opened for writing during the save",
                        f"writing into the live {name} (open(path, 'wb') truncates it first): a process killed half "
                        "way leaves a truncated file", _TEMPORARY)
    if kind == "in-place":
        return _Verdict(f"{name} kept its inode while its bytes changed",
                        f"the new bytes were written into the old {name} (torch.save(obj, path) truncates the old "
                        "file first) instead of a complete file being renamed onto it", _TEMPORARY)
    malformed(f"an unknown kind of write: {kind!r}")


_ORDER = ("renamed-onto-itself", "renamed-while-open", "moved-aside", "removed", "copied-onto",
          "renamed-from-elsewhere", "written", "in-place")


def _events(seen: Any) -> list[tuple[str, str, str]]:
    """The recorded events and in-place writes of one save, validated."""
    if not isinstance(seen, dict) or not isinstance(seen.get("events"), list) or not isinstance(
            seen.get("in_place"), list):
        malformed(f"the writes: {describe(seen)}")
    events = []
    sizes = seen.get("renamed_sizes", {})
    if not isinstance(sizes, dict):
        malformed(f"the rename sizes: {describe(sizes)}")
    for event in seen["events"]:
        if not (isinstance(event, (list, tuple)) and len(event) == 3 and all(isinstance(e, str) for e in event)):
            malformed(f"a write: {describe(event)}")
        if event[0] == "renamed-while-open" and _complete_at_rename(sizes.get(event[1])):
            continue  # flushed before the rename: every byte was in the file that became the target
        events.append((event[0], event[1], event[2]))
    for name in seen["in_place"]:
        if not isinstance(name, str):
            malformed(f"an in-place write: {describe(name)}")
        events.append(("in-place", name, ""))
    return events


def _complete_at_rename(sizes: Any) -> bool:
    """Whether a file renamed onto a target while still open already held all its bytes on disk then (its size at
    the rename is its size at the end: nothing written or flushed after), as after `flush()` and `os.fsync()`."""
    return (isinstance(sizes, list) and len(sizes) == 2 and all(type(size) is int for size in sizes)
            and sizes[0] == sizes[1] and sizes[0] > 0)


def judge_writes(seen: Any, *, during: str, code: str = "not-atomic") -> None:
    """Fail with `code` when the save described by `during` was seen writing a target in a way a kill breaks."""
    events = _events(seen)
    if not events:
        return
    kind, name, other = min(events, key=lambda event: _ORDER.index(event[0]) if event[0] in _ORDER else -1)
    verdict = _verdict(kind, name, other)
    fail(code, observed=f"{during}: {verdict.observed}",
         expected=f"{name} is only ever replaced whole, by renaming a complete, closed file onto it",
         cause=verdict.cause, where=verdict.where)
