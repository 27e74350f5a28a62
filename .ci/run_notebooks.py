"""Run notebooks top to bottom in this Python's own kernel; exit 1 naming every cell that failed or wrote to stderr.

The student-tree CI step (`.ci/student-tree`) runs it in the lowest-torch environment: a check that fails raises,
and nbgrader would score a test cell that writes to stderr 0, so both fail here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def problems(path: Path) -> list[str]:
    """What went wrong running `path`: a cell's error, or its output on stderr."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    found = []
    try:
        client.execute()
    except CellExecutionError as error:
        found.append(f"{path.name}: {str(error)[-1500:]}")
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.append(f"{path.name}, cell {index}: wrote to stderr: {output.get('text', '')[:500]}")
    return found


def main(paths: list[str]) -> int:
    import torch
    import torchvision

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    failed, passed = [], 0
    for path in map(Path, paths):
        started = time.perf_counter()
        found = problems(path)
        print(f"{path.name}: {'ok' if not found else 'FAILED'} ({time.perf_counter() - started:.0f} s)")
        failed += found
        passed += not found
    if failed:
        print("\n".join(failed))
    print(f"notebooks: {passed} passed, {len(paths) - passed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
