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
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def _refusal(error: Exception) -> str:
    """The sentence of a weights-only load's refusal that names the class it met ("Unsupported global: GLOBAL
    types.SimpleNamespace was not an allowed global by default"), or the start of any other error."""
    for line in str(error).splitlines():
        if "Unsupported global" in line:
            return line[line.index("Unsupported global"):].split(". Please use")[0][:300]
    return f"{type(error).__name__}: {error}"[:300]


@register(
    "16-save-artefact",
    hints=Hints(
        nudge="Save data, not objects: a dict holding the config (plain Python values) and model.state_dict() "
        "(tensors), written with torch.save to exactly the path you are given.",
        concept="A deployable artefact is weights plus the code that rebuilds the model. torch.load(path, "
        "weights_only=True) reads tensors, numbers, strings, lists and dicts, and refuses every other class, "
        "because unpickling a class can run arbitrary code. state_dict() holds parameters and buffers.",
        solution='torch.save({"config": dict(config), "state_dict": model.state_dict()}, path)',
        section="1. What you ship: weights plus code",
    ),
    requires={
        "no-file": Requirement(
            "writes the artefact to `path` itself",
            hint="List the folder after calling your function: is there a file named exactly like `path`?"),
        "not-weights-only": Requirement(
            "the file loads with torch.load(path, weights_only=True): no pickled module or other object",
            hint="Run torch.load(path, weights_only=True) on your file and read the 'Unsupported global' it names: "
            "which object of a class did you save?"),
        "wrong-layout": Requirement(
            'the file holds a dict with the keys "config" and "state_dict"',
            hint="Print torch.load(path, weights_only=True).keys(): are both keys there, spelled exactly?"),
        "wrong-config": Requirement(
            'artefact["config"] equals the config dict it was given',
            hint='Compare torch.load(path, weights_only=True)["config"] == config: what type did you store?'),
        "missing-buffers": Requirement(
            "the state_dict includes the buffers (BatchNorm running statistics), not only the parameters",
            hint="Compare the keys you saved with model.state_dict().keys(): which names are missing, and what "
            "are they?"),
        "wrong-weights": Requirement(
            "every tensor is the model's own, unchanged: same names, dtypes and values",
            hint="Compare each saved tensor with model.state_dict()[name]: dtype first, then torch.equal."),
        "model-changed": Requirement(
            "leaves the model as it was (its mode, dtype and weights): training goes on after a save",
            hint="Which call of yours changes the model itself (.eval(), .half(), .to(...)) rather than what you "
            "save?"),
    },
)
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
