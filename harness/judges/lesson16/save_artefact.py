"""16-save-artefact, the judge.

The file loads with weights_only=True into {"config": config, "state_dict": the model's state_dict}.
"""

from __future__ import annotations

import re

import torch

from harness.checks.lesson16.common import case_config, case_model, cloned_state
from harness.contract.case import Case
from harness.contract.compare import same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson16.common import _states_equal


def _state_problem(saved: dict, want: dict[str, torch.Tensor]) -> tuple[str, str, str] | None:
    """(code, observed, cause) of how `saved` differs from the state_dict `want`, or None when it is the same."""
    missing, extra = sorted(set(want) - set(saved)), sorted(set(saved) - set(want))
    buffers = {k for k in want if "running_" in k or "num_batches_tracked" in k}
    if missing and set(missing) <= buffers and not extra:
        return ("missing-buffers", f"the saved state_dict lacks {', '.join(missing)}",
                "the parameters alone were saved (named_parameters() or parameters()): buffers such as BatchNorm's "
                "running statistics are part of state_dict() too, and the model predicts differently without them")
    if missing or extra:
        return ("wrong-weights", f"the saved names differ: missing {missing[:4]}, unexpected {extra[:4]}",
                "the names were changed (a prefix such as 'module.' or '_orig_mod.' from a wrapper, or renamed keys)")
    for name, value in want.items():
        got = saved[name]
        if not isinstance(got, torch.Tensor) or got.shape != value.shape:
            return ("wrong-weights", f"{name} is {type_name(got)}" if not isinstance(got, torch.Tensor)
                    else f"{name} has shape {tuple(got.shape)}", "something else than the model's tensor was saved")
        if got.dtype != value.dtype:
            return ("wrong-weights", f"{name} was saved as {got.dtype}, the model's is {value.dtype}",
                    "the tensors were converted (.half(), .to(dtype)) before saving: the served model would not "
                    "compute what was trained")
        if not same_values(got, value, dtype=False):
            return ("wrong-weights", f"the values of {name} differ from the model's",
                    "another model's (or an earlier) state_dict was saved, or the tensors were changed")
    return None


@judges(
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
def judge_save_artefact(seen: dict, *, case: Case) -> str:
    """The file loads with weights_only=True into {"config": config, "state_dict": the model's state_dict}."""
    model, config = case_model(case, salt=0), case_config(case)
    want = cloned_state(model)
    where = "the body of save_artefact"
    if seen.get("training_after") is not True or not _states_equal(seen.get("state_after"), want):
        changed = "its mode (now eval)" if seen.get("training_after") is False else "its weights or dtype"
        fail("model-changed", observed=f"after save_artefact the model had changed: {changed}",
             expected="the model exactly as it was, in training mode: training usually goes on after a save",
             cause="a call that changes the model in place (.eval(), .half(), .to(dtype), a load_state_dict)",
             where=where)
    if seen.get("written") is not True:
        files = seen.get("files") if isinstance(seen.get("files"), list) else []
        fail("no-file", observed=f"no file at path; the folder holds {files or 'nothing'}",
             expected="the artefact written at exactly the path given",
             cause="a name of your own, or a suffix added to path (path + '.pt')" if files
             else "nothing was saved (a missing torch.save, or it saved an object but not to a file)",
             where="the torch.save(...) line of save_artefact")
    if "refused" in seen:
        refusal = str(seen["refused"])[:300]
        named = re.search(r"GLOBAL (\S+)", refusal)
        fail("not-weights-only",
             observed=f"torch.load(path, weights_only=True) refused the file: {refusal}",
             expected="a file of tensors and plain values (dict, list, str, int, float) that loads with weights_only",
             cause=(f"the file holds an object of the class {named.group(1)}" if named else
                    "the file holds something a weights-only load refuses")
             + ", and weights_only refuses every class: save model.state_dict(), not the module (torch.save(model)), "
             "and the config as a dict, not as a dataclass or a namespace", where="what you pass to torch.save in "
             "save_artefact")
    loaded = seen.get("loaded")
    if not isinstance(loaded, dict) or not {"config", "state_dict"} <= set(loaded):
        keys = sorted(loaded)[:6] if isinstance(loaded, dict) else None
        looks_like_state = keys is not None and all("." in k for k in keys)
        fail("wrong-layout", observed=f"the file holds {type_name(loaded)}" + (f" with keys {keys}" if keys else ""),
             expected='a dict with the keys "config" and "state_dict"',
             cause="the state_dict alone was saved: without its config, nobody can rebuild the model"
             if looks_like_state else "other key names, or another container than a dict",
             where="what you pass to torch.save in save_artefact")
    saved_config = loaded["config"]
    if not (isinstance(saved_config, dict) and set(saved_config) == set(config) and all(
            type(saved_config[k]) is type(v) and saved_config[k] == v for k, v in config.items())):
        fail("wrong-config",
             observed=f'artefact["config"] is {type_name(loaded["config"])}: {str(loaded["config"])[:120]}',
             expected=f"the config dict it was given: {config}",
             cause="the config was turned into something else (a JSON string, a list) or replaced",
             where='the "config" entry in save_artefact')
    if not isinstance(loaded["state_dict"], dict):
        fail("wrong-layout", observed=f'artefact["state_dict"] is {type_name(loaded["state_dict"])}',
             expected="model.state_dict(): a dict of names to tensors",
             cause="the parameters were saved as a list (list(model.parameters())) or another object",
             where='the "state_dict" entry in save_artefact')
    problem = _state_problem(loaded["state_dict"], want)
    if problem:
        code, observed, cause = problem
        fail(code, observed=observed, expected="model.state_dict(): every parameter and buffer, unchanged",
             cause=cause, where='the "state_dict" entry in save_artefact')
    return ("the artefact loads with weights_only=True into the config and the complete state_dict (buffers "
            "included); the model is unchanged")
