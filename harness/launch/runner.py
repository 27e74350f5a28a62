"""torchrun's process in a launch: torchrun itself, tied to its launcher and reporting how each rank ended.

`python -m harness.launch.runner WORK LAUNCHER_PID LAUNCHER_START TORCHRUN_ARGS...` runs torchrun in this
process with two additions:

- it watches the launcher: when the launcher ends (a kernel restart's SIGKILL included) every rank is ended
  and the work folder removed, so no rank keeps training and writing checkpoints on its own;
- it writes how each failed rank ended (`ended.json`: rank -> exit code, negative for a signal), which
  torchrun knows and the ranks cannot write themselves when a signal kills them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from harness.launch.lifeline import PARENT_ENV, end_descendants, watch_launcher
from harness.launch.outcome import ENDED


def _abandon(work: Path) -> None:
    """The launcher is gone: end every rank, remove the work folder, and end torchrun."""
    end_descendants()
    shutil.rmtree(work, ignore_errors=True)
    os._exit(1)


def main(argv: list[str]) -> int:
    """Run torchrun with `argv[3:]` for the launch whose work folder is `argv[0]`; returns the exit status."""
    work, launcher, started, *torchrun_args = argv
    watch_launcher(int(launcher), float(started), lambda: _abandon(Path(work)))
    os.environ[PARENT_ENV] = str(os.getpid())  # the ranks die with this process (`die_with_parent`)

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(torchrun_args))
    except ChildFailedError as error:
        ended = {rank: failure.exitcode for rank, failure in error.failures.items()}
        (Path(work) / ENDED).write_text(json.dumps(ended))
        print(error.format_msg(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
