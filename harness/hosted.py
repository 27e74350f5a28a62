"""What a hosted runtime reads from a lesson notebook's metadata: Colab's and Kaggle's accelerator.

Opened in Colab or imported into Kaggle, a notebook asks for a GPU through its metadata. The lessons whose
measurements a GPU changes (the ones `harness doctor` says are measured on the device) ask for one; the others
run on the runtime's CPU and leave the free GPU quota alone. Every lesson asks Kaggle for internet, which
`harness/install.py` needs. `solutions/` carries this metadata and the release copies it; a test asserts that
every notebook carries exactly `hosted_metadata(lesson)`.
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
