"""Checks of lesson 16, export and serving: a deployable artefact saved and loaded safely, batched inference,
an ONNX export with a dynamic batch axis, and per-channel int8 weights.

Every check builds its own small classifier from the case (seeded weights, BatchNorm statistics from a few
seeded batches, left in training mode as a model is after training). The probes call the student's function
on it and record data: what `torch.load(..., weights_only=True)` reads back from their file, the state of the
model they return, the mode of every forward (a forward pre-hook), the outputs ONNX Runtime computes from
their .onnx file. The judges rebuild the same model and inputs from the case and recompute every expected
value in eager PyTorch: the judge itself never exports, loads a file or starts ONNX Runtime.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import Opaque, WireError

_EXPORT_ROWS = 4  # the batch size of the example the exercise exports with


# --------------------------------------------------------------------------------------------------
# The case's model
# --------------------------------------------------------------------------------------------------
class Classifier(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Dropout -> Linear: parameters, buffers and train/eval behaviour."""

    def __init__(self, features: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))  # (batch, features) -> (batch, classes)


def build_classifier(*, features: int, hidden: int, classes: int, dropout: float) -> Classifier:
    """The `build_model` the load check passes to the student's loader: the model's code, from its config."""
    return Classifier(features, hidden, classes, dropout)


def case_config(case: Case) -> dict[str, Any]:
    """The configuration of the case's classifier (hidden cases: other sizes)."""
    if case.hidden:
        return {"features": 12, "hidden": 24, "classes": 5, "dropout": 0.3}
    return {"features": 8, "hidden": 16, "classes": 3, "dropout": 0.2}


def case_model(case: Case, salt: int) -> Classifier:
    """The case's classifier, as after training: seeded weights, BatchNorm statistics from 3 seeded batches,
    in training mode. Built identically by probe and judge, without touching the global RNG."""
    config = case_config(case)
    generator = torch.Generator().manual_seed(case.seeded(1600 + salt + (50 if case.hidden else 0)))
    model = build_classifier(**config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
        for _ in range(3):  # BatchNorm's running statistics move away from their defaults, as in training
            model.body(torch.randn(16, config["features"], generator=generator) * 2 + 1)
    return model.train()


def case_inputs(case: Case, rows: int, salt: int) -> torch.Tensor:
    """`rows` seeded input rows for the case's classifier."""
    generator = torch.Generator().manual_seed(case.seeded(1700 + salt + rows))
    return torch.randn(rows, case_config(case)["features"], generator=generator)


def _reference(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The eager output of `model` in eval mode (judge side)."""
    model.eval()
    with torch.inference_mode():
        return model(inputs)


def _type_name(value: Any) -> str:
    return value.type_name if isinstance(value, Opaque) else type(value).__name__


def _states_equal(got: Any, want: dict[str, torch.Tensor]) -> bool:
    """Whether `got` (data from the observation) is exactly the state_dict `want`: keys, dtypes and values."""
    return isinstance(got, dict) and set(got) == set(want) and all(
        isinstance(got[k], torch.Tensor) and got[k].dtype == v.dtype and got[k].shape == v.shape
        and torch.equal(got[k], v) for k, v in want.items())


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _files(folder: str) -> list[str]:
    return sorted(os.listdir(folder))[:20]


# --------------------------------------------------------------------------------------------------
# 16-save-artefact
# --------------------------------------------------------------------------------------------------
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
        seen: dict[str, Any] = {"training_after": model.training, "state_after": _state(model),
                                "files": _files(folder), "written": os.path.isfile(path)}
        if seen["written"]:
            try:
                seen["loaded"] = torch.load(path, weights_only=True, map_location="cpu")
            except Exception as error:  # what torch says when it refuses: shown to the student
                seen["refused"] = f"{type(error).__name__}: {error}"[:600]
    return seen


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
            return ("wrong-weights", f"{name} is {_type_name(got)}" if not isinstance(got, torch.Tensor)
                    else f"{name} has shape {tuple(got.shape)}", "something else than the model's tensor was saved")
        if got.dtype != value.dtype:
            return ("wrong-weights", f"{name} was saved as {got.dtype}, the model's is {value.dtype}",
                    "the tensors were converted (.half(), .to(dtype)) before saving: the served model would not "
                    "compute what was trained")
        if not torch.equal(got, value):
            return ("wrong-weights", f"the values of {name} differ from the model's",
                    "another model's (or an earlier) state_dict was saved, or the tensors were changed")
    return None


@judges("16-save-artefact")
def judge_save_artefact(seen: dict, *, case: Case) -> str:
    """The file loads with weights_only=True into {"config": config, "state_dict": the model's state_dict}."""
    model, config = case_model(case, salt=0), case_config(case)
    want = _state(model)
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
        fail("not-weights-only",
             observed=f"torch.load(path, weights_only=True) refused the file: {str(seen['refused'])[:300]}",
             expected="a file of tensors and plain values (dict, list, str, int, float) that loads with weights_only",
             cause="the file holds an object of a class: the module itself (torch.save(model)), or a config "
             "object (a dataclass, a namespace) instead of a dict; the 'Unsupported global' above names it",
             where="what you pass to torch.save in save_artefact")
    loaded = seen.get("loaded")
    if not isinstance(loaded, dict) or not {"config", "state_dict"} <= set(loaded):
        keys = sorted(loaded)[:6] if isinstance(loaded, dict) else None
        looks_like_state = keys is not None and all("." in k for k in keys)
        fail("wrong-layout", observed=f"the file holds {_type_name(loaded)}" + (f" with keys {keys}" if keys else ""),
             expected='a dict with the keys "config" and "state_dict"',
             cause="the state_dict alone was saved: without its config, nobody can rebuild the model"
             if looks_like_state else "other key names, or another container than a dict",
             where="what you pass to torch.save in save_artefact")
    saved_config = loaded["config"]
    if not (isinstance(saved_config, dict) and set(saved_config) == set(config) and all(
            type(saved_config[k]) is type(v) and saved_config[k] == v for k, v in config.items())):
        fail("wrong-config",
             observed=f'artefact["config"] is {_type_name(loaded["config"])}: {str(loaded["config"])[:120]}',
             expected=f"the config dict it was given: {config}",
             cause="the config was turned into something else (a JSON string, a list) or replaced",
             where='the "config" entry in save_artefact')
    if not isinstance(loaded["state_dict"], dict):
        fail("wrong-layout", observed=f'artefact["state_dict"] is {_type_name(loaded["state_dict"])}',
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


# --------------------------------------------------------------------------------------------------
# 16-load-artefact
# --------------------------------------------------------------------------------------------------
_SPRUNG: list[str] = []


def _spring() -> str:
    """What the trap artefact's pickle calls when a loader unpickles it: a harmless stand-in for an attacker's
    code, which records that it ran."""
    _SPRUNG.append("ran")
    return "this string was made by code the file told the loader to run"


class _Trap:
    """An object whose unpickling runs `_spring` (as a malicious file's would run anything)."""

    def __reduce__(self) -> tuple[Callable[[], str], tuple]:
        return (_spring, ())


def _renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state_dict with the head's weight under another name (an artefact of another version of the code)."""
    return {("classifier.weight" if k == "head.weight" else k): v for k, v in state.items()}


@register(
    "16-load-artefact",
    hints=Hints(
        nudge="Three steps: read the file with torch.load(..., weights_only=True), build the model from its "
        "config, then load the weights strictly and switch to eval mode.",
        concept="weights_only=True unpickles only tensors and plain values, so a file cannot run code while it "
        "loads; strict loading makes a name that does not match an error instead of a silently random layer; "
        "a served model runs in eval mode (Dropout off, BatchNorm's running statistics).",
        solution='artefact = torch.load(path, weights_only=True, map_location="cpu")\n'
        'model = build_model(**artefact["config"])\n'
        'model.load_state_dict(artefact["state_dict"])\n'
        "return model.eval()",
        section="1. What you ship: weights plus code",
    ),
    requires={
        "not-a-module": Requirement(
            "returns the model (an nn.Module)",
            hint="Print type(load_artefact(path, build_model)): what does load_state_dict return?"),
        "wrong-weights": Requirement(
            "the returned model holds the saved weights and buffers",
            hint="Compare load_artefact(...).state_dict() with the saved one: did the weights reach the model you "
            "return?"),
        "train-mode": Requirement(
            "returns the model in eval mode",
            hint="Print model.training for the model you return: a freshly built module starts in training mode."),
        "unsafe-load": Requirement(
            "loads with weights_only=True: a file holding any other object raises instead of running its code",
            hint="What does torch.load(path, weights_only=False) do with a pickled object whose class says "
            "'call this function'? Do not catch the error that weights_only=True raises."),
        "not-strict": Requirement(
            "loads strictly: an artefact whose names do not match the model raises",
            hint="What does load_state_dict(..., strict=False) do with a key it does not know? Which layer keeps "
            "its random initialisation then?"),
    },
)
def probe_load_artefact(load_artefact: Callable[..., Any], *, case: Case) -> dict:
    """Call `load_artefact` on a good artefact, on one that runs code when unpickled, and on one with a renamed
    key; record the returned model's type, mode and state, and what each bad artefact did."""
    model, config = case_model(case, salt=10), case_config(case)
    state = model.state_dict()
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="harness-16-") as folder:
        good, trap, renamed = (os.path.join(folder, name) for name in ("good.pt", "trap.pt", "renamed.pt"))
        torch.save({"config": dict(config), "state_dict": state}, good)
        torch.save({"config": dict(config), "state_dict": state, "note": _Trap()}, trap)
        torch.save({"config": dict(config), "state_dict": _renamed(state)}, renamed)
        loaded = load_artefact(good, build_classifier)
        seen["type"] = type(loaded).__name__
        if isinstance(loaded, nn.Module):
            seen["training"] = loaded.training
            seen["state"] = _state(loaded)
        for name, path in (("trap", trap), ("renamed", renamed)):
            _SPRUNG.clear()
            try:
                load_artefact(path, build_classifier)
                seen[name] = None
            except Exception as error:  # raising is the expected behaviour
                seen[name] = f"{type(error).__name__}: {error}"[:300]
            if name == "trap":
                seen["sprung"] = bool(_SPRUNG)
        _SPRUNG.clear()
    return seen


@judges("16-load-artefact")
def judge_load_artefact(seen: dict, *, case: Case) -> str:
    """The loader returns the model with the saved state in eval mode; it refuses a file that would run code and
    an artefact whose names do not match."""
    want = _state(case_model(case, salt=10))
    where = "the body of load_artefact"
    if not isinstance(seen.get("type"), str):
        raise WireError("malformed observation: no type")
    if "state" not in seen:
        fail("not-a-module", observed=f"load_artefact returned {seen['type']}",
             expected="the model, an nn.Module",
             cause="load_state_dict returns the missing and unexpected keys (_IncompatibleKeys), not the model"
             if seen["type"] == "_IncompatibleKeys" else
             "the artefact or its state_dict was returned instead of the model built from it"
             if seen["type"] in ("dict", "OrderedDict") else "something other than the model is returned",
             where="the return statement of load_artefact")
    if not _states_equal(seen["state"], want):
        fail("wrong-weights", observed="the returned model's state_dict differs from the saved one",
             expected="the saved weights and buffers, exactly",
             cause="the weights were never loaded (no load_state_dict), or loaded into another instance than the "
             "one returned", where=where)
    if seen.get("training") is not False:
        fail("train-mode", observed="the returned model is in training mode",
             expected="model.eval(): Dropout off and BatchNorm using its running statistics, so each request gets "
             "a deterministic answer that does not depend on the rest of the batch",
             cause="a freshly built module starts in training mode and model.eval() is missing",
             where="the end of load_artefact")
    if seen.get("sprung") is not False:
        fail("unsafe-load", observed="loading a file that holds a pickled object ran the code that object named",
             expected="torch.load(..., weights_only=True), which refuses the object (an UnpicklingError) before "
             "running anything",
             cause="torch.load(..., weights_only=False): unpickling may call any function the file names",
             where="the torch.load(...) line of load_artefact")
    if seen.get("trap") is None:
        fail("unsafe-load", observed="a file holding a pickled object loaded without an error",
             expected="the refusal of weights_only=True reaches the caller as an exception",
             cause="the error is caught (a try/except that falls back to another loader, or returns anyway)",
             where="the try/except around torch.load in load_artefact")
    if seen.get("renamed") is None:
        fail("not-strict", observed="an artefact whose 'head.weight' is named 'classifier.weight' loaded without "
             "an error", expected="load_state_dict raises on a missing or unexpected key (strict loading)",
             cause="load_state_dict(..., strict=False): the unmatched layer keeps its random initialisation, "
             "silently", where="the load_state_dict(...) line of load_artefact")
    return "the saved state, loaded strictly and safely (weights_only=True), in eval mode"


# --------------------------------------------------------------------------------------------------
# 16-predict
# --------------------------------------------------------------------------------------------------
def _predict_calls(case: Case) -> list[tuple[int, int]]:
    """(number of requests, batch_size) of each call; hidden: fewer requests than a batch, and uneven splits."""
    return [(7, 16), (33, 8)] if case.hidden else [(10, 4)]


def _expected_batches(count: int, batch_size: int) -> list[int]:
    return [min(batch_size, count - start) for start in range(0, count, batch_size)]


@register(
    "16-predict",
    hints=Hints(
        nudge="Stack the requests batch_size at a time, run each batch in eval mode under torch.inference_mode(), "
        "concatenate the outputs, and put the model's mode back as it was.",
        concept="Serving runs in eval mode (Dropout off, BatchNorm's running statistics) under "
        "torch.inference_mode() (no graph, no version counters); batching amortises the per-call overhead; the "
        "caller's model keeps its mode.",
        solution="was_training = model.training\nmodel.eval()\nwith torch.inference_mode():\n"
        "    outputs = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]\n"
        "model.train(was_training)\nreturn torch.cat(outputs).cpu()",
        section="2. Inference done right",
    ),
    requires={
        "train-mode": Requirement(
            "the model runs in eval mode",
            hint="Print model.training inside your function, just before the forward."),
        "no-inference-mode": Requirement(
            "every forward runs under torch.inference_mode()",
            hint="What is the difference between torch.no_grad() and torch.inference_mode(), and which does the "
            "exercise ask for?"),
        "wrong-batches": Requirement(
            "runs batches of batch_size requests (the last one may be smaller), in order",
            hint="Print the shape of what you pass to the model at each call: how many rows, how many calls?"),
        "not-a-tensor": Requirement(
            "returns one tensor of shape (len(inputs), classes)",
            hint="What type does your function return? torch.cat joins a list of batch outputs."),
        "wrong-output": Requirement(
            "returns the model's outputs (the logits), row i for request i",
            hint="Compare your result with model(torch.stack(inputs)) in eval mode: is something applied on top?"),
        "flag-not-restored": Requirement(
            "leaves the model in the mode it was in (training stays training)",
            hint="Read model.training before switching to eval, and set it back at the end (model.train(flag))."),
    },
)
def probe_predict(predict: Callable[..., Any], *, case: Case) -> dict:
    """Call `predict(model, inputs, batch_size)` on a model in training mode; record every forward's mode and
    rows (a forward pre-hook), what came back, and the model's mode after."""
    results = []
    for index, (count, batch_size) in enumerate(_predict_calls(case)):
        model = case_model(case, salt=20)
        rows = case_inputs(case, count, salt=index)
        forwards: list[dict[str, Any]] = []

        def record(module: nn.Module, args: tuple[Any, ...], forwards: list[dict[str, Any]] = forwards) -> None:
            first = args[0] if args else None
            forwards.append({"training": module.training, "inference_mode": torch.is_inference_mode_enabled(),
                             "grad": torch.is_grad_enabled(),
                             "rows": int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else -1})

        handle = model.register_forward_pre_hook(record)
        try:
            returned = predict(model, list(rows.unbind(0)), batch_size)
        finally:
            handle.remove()
        results.append({"forwards": forwards, "returned": returned, "training_after": model.training})
    return {"results": results}


@judges("16-predict")
def judge_predict(seen: dict, *, case: Case) -> str:
    """Eval mode, inference_mode, batches of batch_size in order, the logits as one tensor, the mode restored."""
    calls, results = _predict_calls(case), seen.get("results")
    if not isinstance(results, list) or len(results) != len(calls):
        raise WireError("malformed observation: not one result per call")
    for index, ((count, batch_size), result) in enumerate(zip(calls, results, strict=True)):
        what = f"predict on {count} requests with batch_size={batch_size}"
        forwards = result.get("forwards")
        if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
            raise WireError("malformed observation: forwards is not a list of records")
        if any(f.get("training") is not False for f in forwards):
            fail("train-mode", observed=f"the model ran in training mode in {what}",
                 expected="eval mode: Dropout off and BatchNorm's running statistics, so a request's answer does "
                 "not depend on chance or on the other requests of its batch",
                 cause="model.eval() is missing (the model arrives in training mode, as after training)",
                 where="before the forward in predict")
        if any(f.get("inference_mode") is not True for f in forwards):
            under = "torch.no_grad()" if all(f.get("grad") is False for f in forwards) else "grad mode on"
            fail("no-inference-mode", observed=f"the forward ran with {under}, not under torch.inference_mode()",
                 expected="every forward under torch.inference_mode()",
                 cause="torch.no_grad() was used: it skips the graph but still keeps version counters; "
                 "inference_mode() skips both" if under == "torch.no_grad()" else
                 "no inference_mode block: every forward builds an autograd graph nobody uses",
                 where="the block around the forward in predict")
        rows = [f.get("rows") for f in forwards]
        want_rows = _expected_batches(count, batch_size)
        if rows != want_rows:
            cause = ("one request at a time: no batching, one call per request" if rows == [1] * count else
                     "all requests in one call, ignoring batch_size" if rows == [count] else
                     "the slicing drops or repeats requests (check the range step and the last, smaller batch)")
            fail("wrong-batches", observed=f"the model was called on batches of {rows[:12]} rows in {what}",
                 expected=f"batches of {want_rows}", cause=cause, where="the loop over the requests in predict")
        got = result.get("returned")
        if not isinstance(got, torch.Tensor):
            fail("not-a-tensor", observed=f"predict returned {_type_name(got)}",
                 expected=f"one tensor of shape ({count}, classes)",
                 cause="the batch outputs were returned as a list: join them with torch.cat" if isinstance(got, list)
                 else "something other than the outputs is returned", where="the return statement of predict")
        want = _reference(case_model(case, salt=20), case_inputs(case, count, salt=index))
        if got.shape != want.shape or got.dtype != want.dtype or not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            softmaxed = got.shape == want.shape and got.is_floating_point() and torch.allclose(
                got, want.softmax(-1), rtol=1e-4, atol=1e-5)
            fail("wrong-output", observed=f"the outputs differ from the model's logits in {what}"
                 + (f" (shape {tuple(got.shape)}, {got.dtype})" if got.shape != want.shape or got.dtype != want.dtype
                    else ""),
                 expected=f"the logits, shape {tuple(want.shape)}, row i for request i",
                 cause="a softmax was applied to the logits" if softmaxed else
                 "something was applied on top of the logits (argmax, softmax, a rounding), or rows were reordered",
                 where="what predict collects from each batch")
        if result.get("training_after") is not True:
            fail("flag-not-restored", observed=f"the model was left in eval mode by {what}",
                 expected="the mode it arrived in (training): the caller may go on training",
                 cause="model.eval() without setting the mode back", where="the end of predict")
    return "eval mode under inference_mode, batches of batch_size in order, the logits as one tensor, mode restored"


# --------------------------------------------------------------------------------------------------
# 16-onnx-export
# --------------------------------------------------------------------------------------------------
def _onnx_batches(case: Case) -> list[int]:
    return [1, 33, 5] if case.hidden else [1, 17]


@register(
    "16-onnx-export",
    hints=Hints(
        nudge="torch.onnx.export(model, (example,), path, dynamo=True, ...) in eval mode, with the names the "
        "exercise gives and the batch axis declared dynamic (torch.export.Dim).",
        concept="The exporter traces the model on the example: every shape it sees becomes a constant unless "
        "declared dynamic, and the mode it runs in (train or eval) is frozen into the graph. Serving code feeds "
        "ONNX Runtime by input name.",
        solution='model.eval()\ntorch.onnx.export(model, (example,), path, dynamo=True, verbose=False, '
        'input_names=["features"], output_names=["logits"], '
        'dynamic_shapes=({0: torch.export.Dim("batch")},))',
        section="3. torch.export, ONNX and ONNX Runtime",
    ),
    requires={
        "no-file": Requirement(
            "writes the .onnx file to `path`",
            hint="What does torch.onnx.export(..., dynamo=True) return, and does it save anything when it is "
            "given no file?"),
        "wrong-names": Requirement(
            'the input is named "features" and the output "logits"',
            hint="Print [i.name for i in session.get_inputs()] for your file: which exporter argument names them?"),
        "static-batch": Requirement(
            "the batch axis is dynamic: the file runs at batch sizes other than the example's",
            hint="Print session.get_inputs()[0].shape: a number where the batch size goes means it was frozen at "
            "export. Which argument declares an axis dynamic?"),
        "train-mode": Requirement(
            "exports the model in eval mode",
            hint="In which mode is the model when it arrives, and what does the exporter freeze into the graph?"),
        "wrong-output": Requirement(
            "ONNX Runtime computes the model's logits (atol 1e-4, rtol 1e-3)",
            hint="Compare session.run(...) with model(x) in eval mode on a few rows: is something added to the "
            "exported computation?"),
    },
)
def probe_onnx_export(export_onnx: Callable[..., Any], *, case: Case) -> dict:
    """Call `export_onnx(model, example, path)` on a model in training mode; record the mode of the forwards
    the exporter traced, the file's input and output names and shapes, and what ONNX Runtime computes from it
    at each of the case's batch sizes."""
    from harness.export import onnx_session  # ONNX Runtime: imported only by this check

    model = case_model(case, salt=30)
    modes: list[bool] = []
    handle = model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="harness-16-") as folder:
        path = os.path.join(folder, "classifier.onnx")
        try:
            with warnings.catch_warnings(record=True) as caught:  # the exporter's warnings: data, not stderr
                warnings.simplefilter("always")
                returned = export_onnx(model, case_inputs(case, _EXPORT_ROWS, salt=99), path)
        finally:
            handle.remove()
        seen.update(modes=modes, returned=type(returned).__name__, warnings=[str(w.message)[:200] for w in caught][:5],
                    written=os.path.isfile(path), files=_files(folder))
        if not seen["written"]:
            return seen
        session = onnx_session(path)
        seen["inputs"] = [(i.name, [d if isinstance(d, (int, str)) else None for d in i.shape])
                          for i in session.get_inputs()]
        seen["outputs"] = [o.name for o in session.get_outputs()]
        runs = []
        for rows in _onnx_batches(case):
            x = case_inputs(case, rows, salt=40)
            try:
                runs.append({"output": torch.from_numpy(session.run(None, {seen["inputs"][0][0]: x.numpy()})[0])})
            except Exception as error:  # ONNX Runtime refused these inputs: data for the judge
                runs.append({"error": f"{type(error).__name__}: {error}"[:300]})
        seen["runs"] = runs
    return seen


@judges("16-onnx-export")
def judge_onnx_export(seen: dict, *, case: Case) -> str:
    """The file exists, names its input and output as asked, has a dynamic batch axis, was exported in eval mode,
    and ONNX Runtime's outputs match eager's within the tolerance at every batch size."""
    where = "the torch.onnx.export(...) call of export_onnx"
    if seen.get("written") is not True:
        program = seen.get("returned") == "ONNXProgram"
        fail("no-file", observed="no file at path" + (f"; export_onnx returned an {seen.get('returned')}" if program
                                                        else f"; the folder holds {seen.get('files') or 'nothing'}"),
             expected="the .onnx file written at exactly the path given",
             cause="torch.onnx.export(..., dynamo=True) was given no file: it returns an ONNXProgram that you must "
             "save (program.save(path)) or pass path as its third argument" if program else
             "another file name (a suffix added to path) or nothing saved", where=where)
    modes = seen.get("modes")
    if not isinstance(modes, list) or not all(isinstance(m, bool) for m in modes):
        raise WireError("malformed observation: modes is not a list of flags")
    if any(modes):
        fail("train-mode", observed="the exporter traced the model in training mode"
             + ("; torch warned: " + seen["warnings"][0][:120] if seen.get("warnings") else ""),
             expected="model.eval() before exporting: the graph keeps Dropout and BatchNorm as they ran",
             cause="the model arrives in training mode (as after training) and model.eval() is missing",
             where="before the export call in export_onnx")
    inputs, outputs = seen.get("inputs"), seen.get("outputs")
    if not (isinstance(inputs, list) and inputs and isinstance(outputs, list) and outputs
            and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[1], list) for i in inputs)):
        raise WireError("malformed observation: no input or output description")
    names = ([i[0] for i in inputs], outputs)
    if names != (["features"], ["logits"]):
        fail("wrong-names", observed=f"inputs {names[0]}, outputs {names[1]}",
             expected="one input named 'features' and one output named 'logits'",
             cause="input_names and output_names are missing (the exporter then uses the forward's argument name "
             "and an internal node name) or spelled differently", where=where)
    shape = inputs[0][1]
    features = case_config(case)["features"]
    if not shape or isinstance(shape[0], int) or shape[1:] != [features]:
        fail("static-batch", observed=f"the input's shape in the file is {shape}",
             expected=f"['batch', {features}]: a named, dynamic first axis",
             cause="no dynamic_shapes (torch.export.Dim) for axis 0: the exporter froze the example's batch size "
             f"({_EXPORT_ROWS})" if shape and shape[0] == _EXPORT_ROWS else
             "the dynamic axis is declared on the wrong dimension", where=where)
    runs, batches = seen.get("runs"), _onnx_batches(case)
    if not isinstance(runs, list) or len(runs) != len(batches):
        raise WireError("malformed observation: not one run per batch size")
    model = case_model(case, salt=30)
    for rows, run in zip(batches, runs, strict=True):
        if not isinstance(run, dict):
            raise WireError("malformed observation: a run is not a record")
        want = _reference(model, case_inputs(case, rows, salt=40))
        got = run.get("output")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(
                got.float(), want, rtol=1e-3, atol=1e-4):
            observed = (f"ONNX Runtime raised at batch {rows}: {run.get('error', '')[:200]}" if "error" in run else
                        f"at batch {rows}, output of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor)
                        and got.shape != want.shape else
                        f"at batch {rows}, largest difference {float((got.float() - want).abs().max()):.3g} from eager"
                        if isinstance(got, torch.Tensor) else f"at batch {rows}, {_type_name(got)}")
            fail("wrong-output", observed=observed, expected=f"eager's logits within atol 1e-4, rtol 1e-3, shape "
                 f"{tuple(want.shape)}",
                 cause="the exported computation is not the model's forward (a softmax or another function "
                 "wrapped around it, other weights, or another dtype)", where=where)
    return (f"an .onnx file with input 'features' ['batch', {features}] and output 'logits', exported in eval mode; "
            f"ONNX Runtime matches eager at batch sizes {batches}")


# --------------------------------------------------------------------------------------------------
# 16-int8-weights
# --------------------------------------------------------------------------------------------------
def _weights(case: Case) -> torch.Tensor:
    """A weight matrix whose rows differ in size by orders of magnitude, with one all-zero row (a pruned or
    dead unit)."""
    generator = torch.Generator().manual_seed(case.seeded(1800 + (5 if case.hidden else 0)))
    rows, cols, zero = (16, 33, 11) if case.hidden else (6, 10, 3)
    magnitude = 10.0 ** torch.linspace(-3, 1, rows).unsqueeze(1)
    weight = torch.randn(rows, cols, generator=generator) * magnitude
    weight[zero] = 0.0
    return weight


@register(
    "16-int8-weights",
    hints=Hints(
        nudge="One scale per output row: the row's largest |w| divided by 127; q = round(w / scale), clamped to "
        "[-127, 127], as int8. A row of zeros needs a scale that is not 0.",
        concept="Symmetric per-channel int8: each output row r gets scale_r = max|W[r]| / 127, so its largest "
        "weight maps to ±127 and every weight is off by at most scale_r / 2 after rounding. One scale for the "
        "whole matrix would round the small rows to 0.",
        solution="scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127\n"
        "return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale",
        section="4. int8 weights",
    ),
    requires={
        "not-int8": Requirement(
            "returns q as an int8 tensor of the weight's shape",
            hint="Print q.dtype and q.shape: which conversion is missing at the end?"),
        "per-tensor": Requirement(
            "one scale per output row: scale has shape (out_features, 1)",
            hint="Print scale.shape: does each row of the weight get its own scale? amax takes a dim."),
        "wrong-scale": Requirement(
            "scale of row r = max |weight[r]| / 127",
            hint="Which value of the row must map to ±127, and what do you divide it by?"),
        "not-rounded": Requirement(
            "q = round(weight / scale): every weight within scale / 2 of q * scale",
            hint="What does .to(torch.int8) do with 2.7, and with -2.7? Which function rounds to the nearest?"),
        "zero-row": Requirement(
            "a row of zeros gets zeros and a finite scale > 0 (no division by zero)",
            hint="What is 0 / 0 in floating point, and what does it become as int8? Give the scale a floor."),
        "weight-modified": Requirement(
            "leaves the weight unchanged",
            hint="Which of your operations ends with an underscore, or writes into weight?"),
    },
)
def probe_int8_weights(quantize_per_channel: Callable[[torch.Tensor], Any], *, case: Case) -> dict:
    """Call `quantize_per_channel(weight)`; record what it returned and the weight after the call."""
    weight = _weights(case)
    returned = quantize_per_channel(weight)
    return {"returned": tuple(returned) if isinstance(returned, (tuple, list)) else returned,
            "weight_after": weight.detach().clone()}


def _quantisation_failure(q: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, zero: torch.Tensor) -> None:
    """Fail with the first requirement (q, scale) breaks, given they have the right dtype and shapes; `zero`
    marks the all-zero rows (1-D)."""
    amax = weight.abs().amax(dim=1, keepdim=True)
    if not bool(torch.isfinite(scale).all()) or bool((scale[zero] <= 0).any()):
        bad = int(zero.nonzero()[0, 0]) if bool(zero.any()) else 0
        fail("zero-row", observed=f"scale of the all-zero row {bad} is {float(scale[bad, 0]):.3g}",
             expected="a finite scale > 0 and q = 0 for that row",
             cause="max|w| / 127 is 0 for a row of zeros, and w / 0 is nan: give the scale a floor (clamp(min=...))",
             where="the scale computation of quantize_per_channel")
    if bool((q[zero] != 0).any()):
        fail("zero-row", observed="the all-zero row was quantised to non-zero values",
             expected="q = 0 for a row of zeros", cause="a division by a zero scale (nan turned into int8)",
             where="the scale computation of quantize_per_channel")
    nonzero = ~zero
    if bool(torch.allclose(scale[nonzero], scale[nonzero][0].expand_as(scale[nonzero]))):
        fail("per-tensor", observed=f"every row has the same scale {float(scale[nonzero][0, 0]):.3g}",
             expected="one scale per row, from that row's own largest |w| (rows here differ by 10^4 in size)",
             cause="the maximum was taken over the whole matrix (amax() without dim, or .max())",
             where="the scale computation of quantize_per_channel")
    want = amax / 127
    if not torch.allclose(scale[nonzero], want[nonzero], rtol=1e-5, atol=0):
        ratio = float((scale[nonzero] / want[nonzero]).median())
        fail("wrong-scale", observed=f"scales are {ratio:.4g} times max|w| / 127",
             expected="scale = max |w| of the row / 127",
             cause="another divisor (128, 255) or a maximum without abs() (the row's largest positive weight)",
             where="the scale computation of quantize_per_channel")
    error = (q.double() * scale.double() - weight.double()).abs()
    if bool((error > scale.double() / 2 * (1 + 1e-4) + 1e-12).any()):
        fail("not-rounded", observed=f"a weight is {float((error / scale.double()).max()):.3g} scale steps from "
             "q * scale", expected="at most half a step: q = round(w / scale)",
             cause="w / scale was truncated toward zero (.to(torch.int8) or .int() without round) or floored",
             where="the line that computes q in quantize_per_channel")


@judges("16-int8-weights")
def judge_int8_weights(seen: dict, *, case: Case) -> str:
    """q int8 of the weight's shape, one scale per row equal to max|w| / 127, q = round(w / scale); zero rows
    fine; the weight unchanged."""
    weight = _weights(case)
    after = seen.get("weight_after")
    if not isinstance(after, torch.Tensor) or after.shape != weight.shape:
        raise WireError("malformed observation: weight_after is not the case's weight")
    if not torch.equal(after, weight):
        fail("weight-modified", observed="the weight changed during the call", expected="the weight left as it was",
             cause="an in-place operation on weight (div_, abs_, clamp_, round_) or an assignment into it",
             where="the body of quantize_per_channel")
    returned = seen.get("returned")
    if not (isinstance(returned, tuple) and len(returned) == 2):
        fail("not-int8", observed=f"quantize_per_channel returned {_type_name(returned)}",
             expected="a pair (q, scale)", cause="one value is returned instead of the pair",
             where="the return statement of quantize_per_channel")
    q, scale = returned
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.shape != weight.shape:
        fail("not-int8", observed=f"q is {_type_name(q)}" + (f" of dtype {q.dtype}, shape {tuple(q.shape)}"
                                                          if isinstance(q, torch.Tensor) else ""),
             expected=f"an int8 tensor of shape {tuple(weight.shape)}",
             cause="the rounded values were kept as float (a missing .to(torch.int8))"
             if isinstance(q, torch.Tensor) and q.is_floating_point() else "another dtype or shape",
             where="the line that computes q in quantize_per_channel")
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point() or scale.shape != (weight.shape[0], 1):
        shape = tuple(scale.shape) if isinstance(scale, torch.Tensor) else None
        fail("per-tensor",
             observed=f"scale is {_type_name(scale)}" + (f" of shape {shape}" if shape is not None else ""),
             expected=f"a float tensor of shape ({weight.shape[0]}, 1): one scale per output row",
             cause="a single scale for the whole matrix (amax() without dim, or a Python number)"
             if shape in ((), (1,), (1, 1)) or shape is None else "keepdim=True is missing, or the wrong dim",
             where="the scale computation of quantize_per_channel")
    _quantisation_failure(q, scale.float(), weight, (weight == 0).all(dim=1))
    return ("int8 q with one scale per row (max|w| / 127), every weight within half a step, zero rows safe, "
            "the weight unchanged")

