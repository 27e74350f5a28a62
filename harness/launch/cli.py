"""`harness launch SCRIPT [ARGS...]`: the torchrun launcher from a shell (the `harness` command's subcommand)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.launch.outcome import LaunchError
from harness.launch.torchrun import launch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness launch SCRIPT [ARGS...]`."""
    parser.add_argument("script", type=Path, help="the training script (it calls harness.distributed.init_distributed)")
    parser.add_argument("script_args", nargs="*", help="the script's own arguments (after --)")
    parser.add_argument("--nproc", type=int, default=2, help="processes on this machine (default 2)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: nccl with GPUs, else gloo")
    parser.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before every process is ended")


def run(args: argparse.Namespace) -> int:
    """Run `harness launch`; a failure prints the failing rank's report and returns 1."""
    try:
        launch(args.script, args.nproc, script_args=args.script_args, backend=args.backend, port=args.port,
               timeout_s=args.timeout)
    except (LaunchError, ValueError, RuntimeError) as error:
        print(f"harness launch: {error}")
        return 1
    return 0
