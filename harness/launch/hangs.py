"""Where each rank was when a launch hung: every rank dumps its Python stack on SIGUSR1, and the launcher reads it.

A rank arms the dump when it starts (`arm_stack_dump`: `faulthandler`, which writes from inside the signal
handler, so a rank blocked in a C++ collective still answers). Before a hung launch is ended, the launcher
asks each rank for its stack (`ask_for_stacks`) and `where_ranks` tells for each one the collective it waits
in (it arrived) or the line it is at (it did not arrive). A rank whose collective times out first (gloo's
"Timed out waiting", at the step deadline `harness.launch` gives its ranks) asks the others itself and writes
where it waited (`where_raised`) and where they were (`note_timeout`), before the launcher ends them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import linecache
import os
import re
import signal
import sysconfig
import time
import traceback
from pathlib import Path
from typing import IO

_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<function>\S+)')
_DUMP_FILES: list[IO[str]] = []  # faulthandler writes to the file descriptor: the file must stay open


def arm_stack_dump(work: Path, rank: int) -> None:
    """In a rank: write the rank's pid, its Python stack to work/stack_RANK.txt on SIGUSR1, and to
    work/crash_RANK.txt when a fatal signal (SIGSEGV, SIGABRT, SIGBUS...) kills it."""
    dump = open(work / f"stack_{rank}.txt", "w")  # noqa: SIM115 - open for the life of the rank
    crash = open(work / f"crash_{rank}.txt", "w")  # noqa: SIM115 - open for the life of the rank
    _DUMP_FILES.extend((dump, crash))
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    faulthandler.enable(file=crash, all_threads=True)
    (work / f"pid_{rank}.txt").write_text(str(os.getpid()))


def crash_site(work: Path, rank: int) -> str:
    """Where the fatal signal that killed `rank` hit it (`where`), "" when no stack was written."""
    path = work / f"crash_{rank}.txt"
    return where(path.read_text()) if path.exists() else ""


def rank_pids(work: Path) -> dict[int, int]:
    """The pid of every rank that has started, by rank."""
    pids = {}
    for path in work.glob("pid_*.txt"):
        with contextlib.suppress(OSError, ValueError):
            pids[int(path.stem.split("_")[1])] = int(path.read_text())
    return pids


def ask_for_stacks(work: Path, ranks: list[int], wait_s: float = 2.0) -> None:
    """Have each of `ranks` (still running) dump its stack; return when they have, or after `wait_s`."""
    pids = rank_pids(work)
    asked = []
    for rank in ranks:
        with contextlib.suppress(KeyError, ProcessLookupError):
            os.kill(pids[rank], signal.SIGUSR1)
            asked.append(work / f"stack_{rank}.txt")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(path.stat().st_size for path in asked if path.exists()):
        time.sleep(0.02)
    time.sleep(0.05)  # let a dump in progress finish


def _main_thread_frames(dump: str) -> list[tuple[str, int, str]]:
    """The frames (file, line, function) of the rank's main thread, innermost first: the thread that runs
    the launcher's rank code."""
    for block in dump.split("\n\n"):
        frames = [(m["file"], int(m["line"]), m["function"]) for m in map(_FRAME.match, block.splitlines()) if m]
        if any(f"harness{os.sep}launch{os.sep}" in file for file, _, _ in frames):
            return frames
    return []


_STDLIB = sysconfig.get_paths()["stdlib"]


def _is_library(file: str) -> bool:
    """Frames that are not the launched code: torch, the launcher, the collectives' wrappers of
    `harness.distributed` (the caller's line says more), Python's standard library."""
    return file.startswith((_STDLIB, "<frozen")) or any(
        part in file for part in (f"{os.sep}torch{os.sep}", f"harness{os.sep}launch{os.sep}",
                                  f"harness{os.sep}distributed.py"))


def where(dump: str) -> str:
    """Where a stack dump shows the rank: "waiting in barrier, called at FILE line N: CODE" when it waits in a
    collective, "at FILE line N in FUNCTION: CODE" otherwise; "" when the dump shows no frame."""
    frames = _main_thread_frames(dump)
    if any(function == note_timeout.__name__ for _, _, function in frames):  # it was reporting its own timeout
        return "waiting in a collective that timed out there too"
    return _place(frames)


def where_raised(error: BaseException) -> str:
    """Where the launched code was when `error` was raised in it, as `where` says it; a collective that timed out
    inside backward is DDP's gradient all-reduce ("waiting in backward, where DDP all-reduces the gradients")."""
    frames = [(frame.filename, frame.lineno or 0, frame.name) for frame in traceback.extract_tb(error.__traceback__)]
    frames.reverse()  # innermost first, as in a dump
    place = _place(frames)
    in_backward = any(f"{os.sep}torch{os.sep}autograd{os.sep}" in file for file, _, _ in frames)
    if place.startswith("at ") and in_backward:
        return f"waiting in backward, where DDP all-reduces the gradients (called {place})"
    return place


def _place(frames: list[tuple[str, int, str]]) -> str:
    """`where` for frames (file, line, function), innermost first."""
    users = [i for i, (file, _, _) in enumerate(frames) if not _is_library(file)]
    if not users:
        return ""
    first = users[0]
    file, line, function = frames[first]
    code = linecache.getline(file, line).strip()
    place = f"{Path(file).name} line {line} in {function}" + (f": {code}" if code else "")
    collectives = [name for path, _, name in frames[:first] if f"distributed{os.sep}distributed_c10d.py" in path]
    if collectives:
        return f"waiting in {collectives[-1]} (called at {place})"
    return f"at {place}"


def where_ranks(work: Path, ranks: list[int], last_lines: dict[int, str]) -> str:
    """One line per rank of `ranks`: where its stack dump shows it, and its last output line."""
    lines = []
    for rank in ranks:
        path = work / f"stack_{rank}.txt"
        place = where(path.read_text()) if path.exists() else ""
        arrived = place.startswith("waiting in")
        said = f"; its last line: {last_lines[rank]!r}" if last_lines.get(rank) else ""
        if not (work / f"pid_{rank}.txt").exists():
            place = "had not started yet (its interpreter was still starting or importing)"
        lines.append(f"  rank {rank}: {'' if arrived else 'did not arrive: '}{place or 'no stack came back'}{said}")
    return "\n".join(lines)


def note_timeout(work: Path, rank: int, error: BaseException) -> None:
    """In a rank whose collective timed out (`error`): have the other ranks dump their stacks, and write where
    this rank waited and where they were to work/timeout_RANK.txt for the launcher's report. Any other error is
    left alone."""
    if "timed out" not in str(error).lower():
        return
    others = sorted(set(rank_pids(work)) - {rank})
    ask_for_stacks(work, others)
    waited = f"  rank {rank}: timed out {where_raised(error) or 'in a collective'}\n"
    (work / f"timeout_{rank}.txt").write_text(waited + where_ranks(work, others, {}))
