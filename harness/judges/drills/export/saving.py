"""Export drills on saving and serving: a state dict with its config, predict in inference mode, a serving script
with three bugs."""

from __future__ import annotations

from typing import Any

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.export import (
    SERVING_STARTER,
    export_config,
    export_inputs,
    trained_classifier,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _reference_probs(case: Case, base: int = 501) -> torch.Tensor:
    model = trained_classifier(case, base).eval()
    with torch.inference_mode():
        return model(export_inputs(case, 510)).softmax(-1)


def _tensor_dict_or_none(value: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return value
    return None


def _judge_safe_load(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        malformed("torch.load calls missing")
    if "False" in calls:
        fail("unsafe-load", observed="torch.load(..., weights_only=False)",
             expected="weights_only=True (the default since PyTorch 2.6)",
             cause="weights_only=False unpickles arbitrary objects: loading a file from elsewhere can run its code; "
             "a checkpoint of tensors, numbers, strings and dicts never needs it", where=where)


def _judge_save_load(seen: dict, *, case: Case) -> str:
    where = "save_model"
    if "refused" in seen:
        fail("pickled-module", observed=f"torch.load(path, weights_only=True) refused the file: {seen['refused']}",
             expected="a file of plain data: a dict with the state_dict (tensors) and the config (numbers)",
             cause="torch.save(model) pickles the module: loading it needs weights_only=False (arbitrary code) and "
             "the exact class at the same import path", where="save {'state_dict': model.state_dict(), 'config': "
             "config}")
    content = seen.get("content")
    if not isinstance(content, dict):
        fail("no-config", observed=f"the file holds {describe(content)}", expected="a dict with the state_dict "
             "and the config", cause="a bare state_dict cannot rebuild the model: its sizes are in the config",
             where=where)
    config = export_config(case)
    if not any(isinstance(v, dict) and v == config for v in content.values()):
        fail("no-config", observed=f"no value of the saved dict equals the config {config} (keys: "
             f"{sorted(content)[:6]})", expected="the config saved next to the weights",
             cause="without the config, load has to guess the layer sizes", where=where)
    want_state = trained_classifier(case).state_dict()
    states = [v for v in content.values() if _tensor_dict_or_none(v) is not None]
    if not any(set(s) == set(want_state) and all(same_values(s[k], want_state[k], dtype=False) for k in want_state)
               for s in states):
        fail("no-state-dict", observed="no value of the saved dict is the model's state_dict",
             expected=f"a dict of tensors with keys {sorted(want_state)[:3]}..., equal to the model's",
             cause="the state_dict (buffers included: BatchNorm's running statistics) is what gets saved",
             where="model.state_dict()")
    _judge_safe_load(seen.get("load_calls"), "load_model")
    if "load_error" in seen:
        fail("load-failed", observed=f"load_model raised {str(seen['load_error'])[:600]}",
             expected="the model rebuilt from the saved config, with the saved weights",
             cause="the model was built with sizes other than the saved config's", where="load_model")
    if seen.get("loaded_type") != "_ExportedClassifier":
        fail("wrong-return", observed=f"load_model returned a {seen.get('loaded_type')}",
             expected="the model built by build(**config)", cause="return the module, not the checkpoint",
             where="load_model")
    expect.close("the loaded model's probabilities", seen.get("out"), _reference_probs(case), atol=1e-5, rtol=1e-4,
                 where="load_model", cause="the weights were not loaded into the rebuilt model (strict loading "
                 "catches that)")
    return "a plain-data checkpoint (state_dict + config) that loads with weights_only=True into an equal model"


_SAVE_LOAD_SOLUTION = '''import torch


def save_model(model, config, path):
    torch.save({"config": dict(config), "state_dict": model.state_dict()}, path)


def load_model(path, build):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = build(**checkpoint["config"])
    model.load_state_dict(checkpoint["state_dict"])
    return model
'''


def _judge_predict(seen: dict, *, case: Case) -> str:
    where = "predict"
    records = seen.get("records")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        malformed("forward records missing")
    if not records:
        fail("no-forward", observed="the model was never called", expected="one forward pass",
             cause="predict must run the model", where=where)
    if any(r.get("training") is not False for r in records):
        fail("train-mode", observed="the model ran in train mode", expected="model.eval() before the forward pass",
             cause="in train mode Dropout zeroes half the features at random and BatchNorm normalises with the "
             "batch's statistics (and overwrites its running ones): predictions change from call to call",
             where="model.eval()")
    if any(r.get("grad_enabled") is not False or seen.get("requires_grad") is True for r in records):
        fail("grad-tracked", observed="the forward pass recorded the autograd graph",
             expected="no graph: inference needs no gradient",
             cause="without torch.inference_mode() every activation is kept for a backward that never comes",
             where="with torch.inference_mode():")
    if any(r.get("inference_mode") is not True for r in records):
        fail("not-inference-mode", observed="the forward pass ran under torch.no_grad()",
             expected="torch.inference_mode()",
             cause="inference_mode also skips version counters and view tracking: it is the faster choice when "
             "the outputs never re-enter autograd", where="with torch.inference_mode():")
    expect.close("predict(model, x)", seen.get("out"), _reference_probs(case), atol=1e-5, rtol=1e-4, where=where,
                 cause="the class probabilities are softmax(model(x), dim=-1)")
    return "eval mode, inference_mode, and the model's class probabilities"


_PREDICT_SOLUTION = '''import torch


def predict(model, x):
    model.eval()
    with torch.inference_mode():
        return model(x).softmax(dim=-1)
'''


def _judge_serving(seen: dict, *, case: Case) -> str:
    where = "load_and_predict"
    _judge_safe_load(seen.get("load_calls"), where)
    want_state = trained_classifier(case, 520).state_dict()
    states = seen.get("loaded_states")
    if not isinstance(states, list):
        malformed("load records missing")
    loaded = [s for s in states if _tensor_dict_or_none(s) is not None and set(s) == set(want_state)]
    if not loaded or not all(same_values(loaded[-1][k], want_state[k], dtype=False) for k in want_state):
        fail("weights-not-loaded", observed="after load_state_dict the model's weights are not the checkpoint's",
             expected="every tensor of the checkpoint in the model",
             cause="the checkpoint was saved from DDP: its keys start with 'module.', so nothing matched, and "
             "strict=False turned that into silence (random weights serve predictions)",
             where="the state dict's keys and the load_state_dict call")
    forwards = seen.get("forwards")
    if not isinstance(forwards, list) or not forwards:
        malformed("forward records missing")
    training = sorted({str(f.get("module")) for f in forwards
                       if isinstance(f, dict) and f.get("training") is not False})
    if training:
        fail("train-mode", observed=f"modules ran in train mode: {', '.join(training[:4])}",
             expected="eval mode while serving", cause="Dropout drops features at random and BatchNorm uses "
             "batch statistics: each request gets a different answer", where="the model's mode before serving")
    if seen.get("requires_grad") is True:
        fail("grad-tracked", observed="the returned probabilities require grad", expected="inference without autograd",
             cause="the forward ran outside torch.inference_mode()", where=where)
    expect.close("the served probabilities", seen.get("out"), _reference_probs(case, 520), atol=1e-5, rtol=1e-4,
                 where=where, cause="softmax of the loaded model in eval mode")
    return "a safe load, every weight in place despite the DDP prefix, eval mode, and the right probabilities"


_SERVING_SOLUTION = '''import torch


def load_and_predict(path, build, x):
    """Load a checkpoint written by a DDP training run and return the class probabilities for x."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = build(**checkpoint["config"])
    state = {k.removeprefix("module."): v for k, v in checkpoint["state_dict"].items()}
    model.load_state_dict(state)  # strict: every key must match
    model.eval()
    with torch.inference_mode():
        return model(x).softmax(dim=-1)
'''


_SERVE_FIX_LOAD = ("weights_only=False", "weights_only=True")


_SERVE_FIX_KEYS = ('    model.load_state_dict(checkpoint["state_dict"], strict=False)\n',
                   '    state = {k.removeprefix("module."): v for k, v in checkpoint["state_dict"].items()}\n'
                   '    model.load_state_dict(state)  # strict: every key must match\n')


_SERVE_FIX_EVAL = ("    with torch.inference_mode():\n", "    model.eval()\n    with torch.inference_mode():\n")


def _serve_fixed(*fixes: tuple[str, str]) -> str:
    return edited(SERVING_STARTER, *fixes)


add_answers(
    Answers(
        drill_id="export-state-dict-config",
        solution=_SAVE_LOAD_SOLUTION,
        wrong_answers=(
            ("import torch\n\ndef save_model(model, config, path):\n    torch.save(model, path)\n\n"
             "def load_model(path, build):\n    return torch.load(path, weights_only=False)\n", "pickled-module"),
            ("import torch\n\ndef save_model(model, config, path):\n    torch.save(model.state_dict(), path)\n\n"
             "def load_model(path, build):\n    model = build(d_in=8, hidden=16, n_out=4)\n"
             "    model.load_state_dict(torch.load(path, weights_only=True))\n    return model\n", "no-config"),
            (edited(_SAVE_LOAD_SOLUTION, ("weights_only=True", "weights_only=False")), "unsafe-load"),
            (edited(_SAVE_LOAD_SOLUTION,
                    ("model.state_dict()}", "{k: v for k, v in model.named_parameters()}}"),
                    ("checkpoint[\"state_dict\"])", "checkpoint[\"state_dict\"], strict=False)")), "no-state-dict"),
        ),
        judge=_judge_save_load,
    )
)


add_answers(
    Answers(
        drill_id="export-predict-inference-mode",
        solution=_PREDICT_SOLUTION,
        wrong_answers=(
            (edited(_PREDICT_SOLUTION, ("    model.eval()\n", "")), "train-mode"),
            (edited(_PREDICT_SOLUTION, ("torch.inference_mode()", "torch.enable_grad()")), "grad-tracked"),
            (edited(_PREDICT_SOLUTION, ("torch.inference_mode()", "torch.no_grad()")), "not-inference-mode"),
            (edited(_PREDICT_SOLUTION, (".softmax(dim=-1)", "")), "wrong-value"),
        ),
        judge=_judge_predict,
    )
)


add_answers(
    Answers(
        drill_id="export-serving-three-bugs",
        solution=_SERVING_SOLUTION,
        wrong_answers=(
            (_serve_fixed(_SERVE_FIX_KEYS, _SERVE_FIX_EVAL), "unsafe-load"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_EVAL), "weights-not-loaded"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_KEYS), "train-mode"),
            (edited(_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_EVAL), (", strict=False", "")), "raised"),
            (edited(_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_KEYS, _SERVE_FIX_EVAL),
                    ("    with torch.inference_mode():\n        return",
                     "    if True:\n        return")), "grad-tracked"),
        ),
        judge=_judge_serving,
    )
)
