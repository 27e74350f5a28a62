"""16-save-artefact, the probe.

Call `save_artefact(model, config, path)`; record the model after, the folder, and what a weights-only
load reads back from the file (or why it refused).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from harness.checks.lesson16.common import _files, case_config, case_model, cloned_state
from harness.contract.case import Case
from harness.contract.registry import register


def _refusal(error: Exception) -> str:
    """The sentence of a weights-only load's refusal that names the class it met ("Unsupported global: GLOBAL
    types.SimpleNamespace was not an allowed global by default"), or the start of any other error."""
    for line in str(error).splitlines():
        if "Unsupported global" in line:
            return line[line.index("Unsupported global"):].split(". Please use")[0][:300]
    return f"{type(error).__name__}: {error}"[:300]


@register("16-save-artefact")
def probe_save_artefact(save_artefact: Callable[..., Any], *, case: Case) -> dict:
    """Call `save_artefact(model, config, path)`; record the model after, the folder, and what a weights-only
    load reads back from the file (or why it refused)."""
    model = case_model(case, salt=0)
    with tempfile.TemporaryDirectory(prefix="harness-16-") as folder:
        path = os.path.join(folder, "classifier.pt")
        save_artefact(model, dict(case_config(case)), path)
        seen: dict[str, Any] = {"training_after": model.training, "state_after": cloned_state(model),
                                "files": _files(folder), "written": os.path.isfile(path)}
        if seen["written"]:
            try:
                seen["loaded"] = torch.load(path, weights_only=True, map_location="cpu")
            except Exception as error:  # what torch says when it refuses: shown to the student
                seen["refused"] = _refusal(error)
    return seen
