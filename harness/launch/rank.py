"""The code each torchrun-launched rank runs: prefix its output, join the group, run, save the result or error.

The script `harness.launch.launch` gives torchrun ends in `run_rank`: for a function, it joins the process
group, calls the function with the arguments the launcher saved, and saves the return value; for a script,
it runs the script as `__main__`. A rank that raises writes its traceback to `error_RANK.txt`, where the
launcher finds it. A rank dies with torchrun's process (`die_with_parent`), and dumps its stack when the
launcher asks (`arm_stack_dump`, for the report on a hang).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from harness.distributed import cleanup_distributed, init_distributed
from harness.launch.hangs import arm_stack_dump, note_timeout
from harness.launch.lifeline import PARENT_ENV, die_with_parent
from harness.launch.transport import load_portable, save_portable


class _RankPrefixed:
    """A text stream that writes whole lines prefixed with the rank, each in one write() to the file
    descriptor: the ranks share torchrun's pipe, and a line written in pieces would interleave with
    another rank's (a pipe write of up to 4096 bytes is never split)."""

    def __init__(self, fd: int, prefix: str) -> None:
        self.fd, self.prefix, self.pending = fd, prefix, ""

    def write(self, text: str) -> int:
        *complete, self.pending = (self.pending + text).split("\n")
        for line in complete:
            os.write(self.fd, f"{self.prefix}{line}\n".encode())
        return len(text)

    def flush(self) -> None:
        """Lines go out as they complete; a partial line waits for its end (or `finish`)."""

    def finish(self) -> None:
        if self.pending:
            self.write("\n")

    def isatty(self) -> bool:
        return False


def run_rank(fn: Callable[..., Any] | None, workdir: str) -> None:
    """Entry point of a launched rank: prefix output, join the group, run, save the result or the error.

    With `fn=None` the launched script (workdir/script.txt names it) runs as `__main__` instead and is
    responsible for its own process group (`harness.distributed.init_distributed`).
    """
    rank = int(os.environ.get("RANK", "0"))
    if PARENT_ENV in os.environ:
        die_with_parent(int(os.environ[PARENT_ENV]))
    work = Path(workdir)
    arm_stack_dump(work, rank)
    sys.stdout.flush()
    sys.stdout = out = _RankPrefixed(sys.stdout.fileno(), f"[rank{rank}] ")
    sys.stderr = err = _RankPrefixed(sys.stderr.fileno(), f"[rank{rank}] ")
    try:
        if fn is None:
            _run_script(work)
        else:
            init_distributed()  # the backend the launcher was given (HARNESS_LAUNCH_BACKEND); every rank connected
            args, kwargs = load_portable(work / "args.pt")
            result = fn(*args, **kwargs)
            save_portable(result, work / f"result_{rank}.pt", f"rank {rank}'s return value")
    except BaseException as error:  # noqa: BLE001 - every failure must reach the notebook with its traceback
        if isinstance(error, SystemExit) and not error.code:
            out.finish()
            cleanup_distributed()
            return
        message = "".join(traceback.format_exception(error))
        note_timeout(work, rank, error)  # before the error file: the launcher ends the others once it exists
        (work / f"error_{rank}.txt").write_text(message)
        out.finish()
        err.write(message)
        err.finish()
        os._exit(1)  # skip interpreter teardown: a dead peer can make process-group shutdown wait
    out.finish()
    err.finish()
    cleanup_distributed()


def _run_script(work: Path) -> None:
    import runpy

    script, *script_args = (work / "script.txt").read_text().split("\0")
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
