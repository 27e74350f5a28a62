"""What a hosted runtime reads from a lesson notebook: Colab's and Kaggle's accelerator, and the install cell.

Opened in Colab or imported into Kaggle, a notebook asks for a GPU through its metadata. The lessons whose
measurements a GPU changes (the ones `harness doctor` says are measured on the device) ask for one; the others
run on the runtime's CPU and leave the free GPU quota alone. Every lesson asks Kaggle for internet, which
`harness/install.py` needs. `solutions/` carries this metadata and the release copies it; a test asserts that
every notebook carries exactly `hosted_metadata(lesson)`. Every lesson's first code cell is `INSTALL_CELL`: on a
runtime without the harness it runs `harness/install.py` in the same kernel.
"""

from __future__ import annotations

from typing import Any

# 05 mixed precision, 10 the capstone, 12 debugging and 13 speed and memory: measured on the device.
GPU_LESSONS = ("05", "10", "12", "13")


def hosted_metadata(lesson: str) -> dict[str, Any]:
    """The `colab`, `kaggle` and `accelerator` entries of lesson `lesson`'s notebook metadata ("05_...")."""
    gpu = lesson[:2] in GPU_LESSONS
    colab: dict[str, Any] = {"provenance": []} | ({"gpuType": "T4"} if gpu else {})
    kaggle = {"accelerator": "gpu" if gpu else "none", "isGpuEnabled": gpu, "isInternetEnabled": True,
              "language": "python", "sourceType": "notebook"}
    return {"colab": colab, "kaggle": kaggle} | ({"accelerator": "GPU"} if gpu else {})


# The first code cell of every lesson, identical in `solutions/` and the release (an ordinary given cell): Run all
# works from any lesson on a fresh hosted runtime, where the harness is not installed yet; where it is (a laptop's
# `make setup`, a hub), the cell does nothing visible. IPython rewrites a `%run` line inside `except` like any other.
INSTALL_CELL_ID = "install-harness"
INSTALL_CELL = """\
# The course's `harness`: already here on your laptop or hub (this cell then does nothing); installed into this
# kernel on a fresh Colab or Kaggle runtime (a few minutes, the runtime's torch kept, no restart).
try:
    import harness
except ModuleNotFoundError:
    %run ../../harness/install.py"""
