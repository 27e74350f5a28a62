"""`harness launch SCRIPT [ARGS...]`: the torchrun launcher from a shell (the `harness` command's subcommand).

SIGTERM and SIGHUP (`kill`, `timeout`, a closed terminal) end the launch the way Ctrl-C does: every rank is
ended and the work folder removed before the command exits with 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from harness.launch.outcome import LaunchError
from harness.launch.torchrun import launch


class _Stopped(BaseException):
    """The command received SIGTERM or SIGHUP: unwinds `launch` so that its cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: FrameType | None) -> None:
    for other in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not interrupt the cleanup
        signal.signal(other, signal.SIG_IGN)
    raise _Stopped(signum)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness launch SCRIPT [ARGS...]`."""
    parser.add_argument("script", type=Path, help="the training script (it calls harness.distributed.init_distributed)")
    parser.add_argument("script_args", nargs="*", help="the script's own arguments (after --)")
    parser.add_argument("--nproc", type=int, default=2, help="processes on this machine (default 2)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: nccl with GPUs, else gloo")
    parser.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one, reserved)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before every process is ended")


def run(args: argparse.Namespace) -> int:
    """Run `harness launch`; a failure prints the failing rank's report and returns 1, SIGTERM or SIGHUP ends
    every rank and returns 128 + the signal's number."""
    previous = {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        launch(args.script, args.nproc, script_args=args.script_args, backend=args.backend, port=args.port,
               timeout_s=args.timeout)
    except (LaunchError, ValueError, RuntimeError) as error:
        print(f"harness launch: {error}")
        return 1
    except _Stopped as stopped:
        name = signal.Signals(stopped.signum).name
        print(f"harness launch: stopped by {name}; every rank was ended.", file=sys.stderr)
        return 128 + stopped.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
