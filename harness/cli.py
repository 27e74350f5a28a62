"""The `harness` command: one subcommand per job, each defined beside the code it runs.

Each entry of COMMANDS names a module that defines `add_arguments(parser)` and `run(args) -> int`.
Modules are imported only when their subcommand runs, so `harness env` does not pay for nbgrader.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

COMMANDS: dict[str, tuple[str, str]] = {
    "env": ("harness.env", "print the environment report (versions, device, precisions)"),
    "doctor": ("harness.doctor", "what this machine will do for the course: a test kernel on the device, native "
               "precisions, CPU cores and workers, whether files survive a restart, each lesson's plan"),
    "drill": ("harness.drills.cli", "interview drills: list, start, check, hint, mock, stats"),
    "release": ("harness.grading.release",
                "regenerate notebooks/ from solutions/ with nbgrader (--check: compare only)"),
    "grade": ("harness.grading.cli",
              "autograde a folder or LMS zip of submissions in parallel: grades, feedback, summary"),
    "showcase": ("harness.showcase", "train the engine showcase (small CNN on shapes, the recommended precision, "
                 "clipping, warmup-cosine, early stopping) and write curves, history and report"),
    "launch": ("harness.launch.cli",
               "run a training script on N processes with torchrun (rank-prefixed logs, timeout)"),
    "course": ("harness.course",
               "run the whole course headless: environment, every lesson autograded, showcase, report"),
    "new-exercise": ("harness.kit", "write a new graded exercise's skeleton: probe and judge modules, its tests' "
                     "stubs, the notebook's cells (CONTRIBUTING.md, 'A check')"),
}


def _available(module_name: str) -> bool:
    """Whether `module_name`'s file is there (found without importing it or its parent packages)."""
    path = Path(__file__).parent.joinpath(*module_name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only subcommand `only`'s module is imported (none for `harness --help`, which
    lists the subcommands from COMMANDS alone)."""
    parser = argparse.ArgumentParser(prog="harness", description="PyTorch Training Lab harness")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if not _available(module_name):  # the student tree has no instructor commands
            continue
        command = sub.add_parser(name, help=help_text, description=help_text)
        if name == only:
            importlib.import_module(module_name).add_arguments(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `harness` console command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(only=chosen).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.run(args) or 0)
