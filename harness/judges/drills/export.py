"""The judge side of the export drills (`harness.drills.bank.export`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, isclose_number, same_values
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.bank.export import (
    _EXPORT_BATCHES,
    _SERVING_STARTER,
    _config,
    _fold_setup,
    _inputs,
    _latency_plan,
    _parity_scenarios,
    _trained,
)
from harness.drills.core import Answers, choice_answers
from harness.judges.drills.whys import add_answers


def _reference_probs(case: Case, base: int = 501) -> torch.Tensor:
    model = _trained(case, base).eval()
    with torch.inference_mode():
        return model(_inputs(case, 510)).softmax(-1)


def _tensor_dict_or_none(value: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return value
    return None


def _judge_safe_load(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise WireError("torch.load calls missing")
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
    config = _config(case)
    if not any(isinstance(v, dict) and v == config for v in content.values()):
        fail("no-config", observed=f"no value of the saved dict equals the config {config} (keys: "
             f"{sorted(content)[:6]})", expected="the config saved next to the weights",
             cause="without the config, load has to guess the layer sizes", where=where)
    want_state = _trained(case).state_dict()
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
        raise WireError("forward records missing")
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


def _judge_parity(seen: dict, *, case: Case) -> str:
    where = "check_parity"
    scenarios, atol, rtol = _parity_scenarios(case)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != len(scenarios):
        raise WireError("results missing")
    for s, result in zip(scenarios, results, strict=True):
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], bool)
                and isinstance(result[1], (int, float))):
            fail("wrong-return", observed=f"check_parity returned {describe(result)}", expected="a tuple (ok: bool, "
                 "max_abs_error: float)", cause="a tensor instead of a bool, or a missing element", where=where)
        ok, worst = result
        same_shapes = all(r.shape == c.shape for r, c in zip(s["ref"], s["cand"], strict=True))
        want_ok = same_shapes and all(bool(((c - r).abs() <= atol + rtol * r.abs()).all())
                                      for r, c in zip(s["ref"], s["cand"], strict=True))
        if ok == want_ok:
            if same_shapes and not any(c.isnan().any() for c in s["cand"]):
                want_worst = max(float((c - r).abs().max()) for r, c in zip(s["ref"], s["cand"], strict=True))
                if not isclose_number(worst, want_worst, rel_tol=1e-4, abs_tol=1e-9):
                    fail("wrong-max-error", observed=f"max_abs_error {worst:.3g} ({s['label']})",
                         expected=f"{want_worst:.3g}: the largest |candidate - reference| over every input",
                         cause="a mean instead of a max, or only some inputs measured", where=where)
            continue
        label = s["label"]
        codes = {"tiny noise": "false-alarm", "large values, small relative error": "false-alarm",
                 "one outlier in the third input": "missed-outlier", "an extra leading dimension":
                 "shape-mismatch-accepted", "a nan": "nan-accepted"}
        causes = {"false-alarm": "the tolerance is atol + rtol * |reference| per element: an absolute-only test "
                  "fails large outputs whose relative error is tiny",
                  "missed-outlier": "every element of every input must be within tolerance: a mean hides one bad "
                  "element, and stopping at the first input hides the others",
                  "shape-mismatch-accepted": "torch.allclose broadcasts: (1, 4, 3) against (4, 3) passes; compare "
                  "shapes first",
                  "nan-accepted": "nan > tol is False, so 'no element exceeds the tolerance' lets a nan through; "
                  "test the elements that are within tolerance instead"}
        code = codes[label]
        fail(code, observed=f"check_parity said ok={ok} for {label}", expected=f"ok={want_ok}",
             cause=causes[code], where=where)
    return "accepts numerical noise and small relative errors, rejects outliers, shape changes and nans"


_PARITY_SOLUTION = '''import torch


def check_parity(reference, candidate, inputs, atol, rtol):
    ok, worst = True, 0.0
    for x in inputs:
        want, got = reference(x), candidate(x)
        if got.shape != want.shape:
            ok = False
            continue
        error = (got - want).abs()
        within = error <= atol + rtol * want.abs()  # False where got is nan
        ok = ok and bool(within.all())
        worst = max(worst, float(error.max()))
    return ok, worst
'''


def _judge_latency(seen: dict, *, case: Case) -> str:
    where = "measure_latency"
    warmup, iters, durations = _latency_plan(case)
    calls, result = seen.get("calls"), seen.get("result")
    if calls != warmup + iters:
        fail("wrong-call-count", observed=f"fn was called {calls} times", expected=f"warmup + iters = "
             f"{warmup + iters}", cause="the warm-up calls and the timed calls are separate loops", where=where)
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = float(result)
    if not isinstance(result, (int, float)):
        fail("wrong-return", observed=f"measure_latency returned {describe(result)}", expected="a float, in ms",
             cause="return the median as a Python float", where=where)
    timed = durations[warmup:warmup + iters]
    want = statistics.median(timed) * 1000

    def near(value: float) -> bool:
        return isclose_number(result, value, rel_tol=1e-6, abs_tol=1e-9)

    if near(want):
        return "warm-up calls untimed, each timed call measured alone, the median in milliseconds"
    if near(statistics.median(durations[:iters]) * 1000) or near(statistics.median(durations[:warmup + iters]) * 1000):
        fail("warmup-timed", observed=f"{result:.4g} ms: the slow warm-up calls were timed",
             expected=f"{want:.4g} ms", cause="the first calls pay for lazy initialisation, caches, autotuning (and "
             "compilation under torch.compile): run warmup calls before timing anything", where=where)
    if near(statistics.mean(timed) * 1000):
        fail("mean-not-median", observed=f"{result:.4g} ms, the mean", expected=f"{want:.4g} ms, the median",
             cause="one pause of 40 ms moves the mean of a few 3 ms calls a lot; the median ignores it. Timing the "
             "whole loop and dividing by iters is also a mean", where=where)
    if near(want / 1000):
        fail("wrong-unit", observed=f"{result:.4g}: seconds", expected=f"{want:.4g} ms",
             cause="perf_counter counts seconds: multiply by 1000", where=where)
    fail("wrong-value", observed=f"{result:.4g} ms", expected=f"{want:.4g} ms (the median of the {iters} timed calls)",
         cause="time each call alone with time.perf_counter() before and after", where=where)


_LATENCY_SOLUTION = '''import statistics
import time

import torch


def measure_latency(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # GPU work is asynchronous: wait for it before reading the clock
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0
'''


def _judge_serving(seen: dict, *, case: Case) -> str:
    where = "load_and_predict"
    _judge_safe_load(seen.get("load_calls"), where)
    want_state = _trained(case, 520).state_dict()
    states = seen.get("loaded_states")
    if not isinstance(states, list):
        raise WireError("load records missing")
    loaded = [s for s in states if _tensor_dict_or_none(s) is not None and set(s) == set(want_state)]
    if not loaded or not all(same_values(loaded[-1][k], want_state[k], dtype=False) for k in want_state):
        fail("weights-not-loaded", observed="after load_state_dict the model's weights are not the checkpoint's",
             expected="every tensor of the checkpoint in the model",
             cause="the checkpoint was saved from DDP: its keys start with 'module.', so nothing matched, and "
             "strict=False turned that into silence (random weights serve predictions)",
             where="the state dict's keys and the load_state_dict call")
    forwards = seen.get("forwards")
    if not isinstance(forwards, list) or not forwards:
        raise WireError("forward records missing")
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
    source = _SERVING_STARTER
    for old, new in fixes:
        source = source.replace(old, new)
    return source


def _judge_fold(seen: dict, *, case: Case) -> str:
    where = "fold_batchnorm"
    linear, bn, x = _fold_setup(case)
    if seen.get("type") != "Linear":
        fail("not-linear", observed=f"fold_batchnorm returned a {seen.get('type')}", expected="one nn.Linear",
             cause="the point of folding is one layer where there were two", where=where)
    if seen.get("linear_changed") is not False:
        fail("mutated-input", observed="the Linear passed in was modified", expected="a new nn.Linear; the "
             "original model left as it was", cause="writing the folded weight into linear.weight in place",
             where="build a new nn.Linear and copy_ into it")
    bn.eval()
    with torch.no_grad():
        want = bn(linear(x))
        scale_no_eps = bn.weight / bn.running_var.sqrt()
        without_eps = (linear(x) - bn.running_mean) * scale_no_eps + bn.bias
        scale = bn.weight / (bn.running_var + bn.eps).sqrt()
        without_bias = (x @ linear.weight.T - bn.running_mean) * scale + bn.bias
        eps_outside = (linear(x) - bn.running_mean) * bn.weight / (bn.running_var.sqrt() + bn.eps) + bn.bias
        shift_unscaled = x @ linear.weight.T * scale + linear.bias - bn.running_mean + bn.bias
        bias_unscaled = x @ linear.weight.T * scale + linear.bias - bn.running_mean * scale + bn.bias
    got = seen.get("out")
    if not close_values(got, want, atol=1e-5, rtol=1e-4):
        if close_values(got, without_eps, atol=1e-5, rtol=1e-4):
            fail("eps-ignored", observed="the folded layer divides by sqrt(running_var)",
                 expected="division by sqrt(running_var + eps)", cause="BatchNorm adds eps before the square root; "
                 "with small variances that changes the output", where=where)
        if close_values(got, without_bias, atol=1e-5, rtol=1e-4):
            fail("bias-dropped", observed="the folded layer ignores the Linear's own bias",
                 expected="b' = (b - running_mean) * gamma / sqrt(var + eps) + beta",
                 cause="the Linear's bias passes through the normalisation too", where=where)
        if close_values(got, eps_outside, atol=1e-5, rtol=1e-4):
            fail("eps-outside-sqrt", observed="the folded layer divides by sqrt(running_var) + eps",
                 expected="division by sqrt(running_var + eps)", cause="eps was added to the standard deviation: "
                 "BatchNorm adds it to the variance, inside the square root, and with these small variances the "
                 "two differ", where=where)
        if close_values(got, shift_unscaled, atol=1e-5, rtol=1e-4):
            fail("bias-not-scaled", observed="the folded bias is b - running_mean + beta: the weight is scaled "
                 "but the bias is not", expected="b' = (b - running_mean) * s + beta with s = gamma / "
                 "sqrt(var + eps)", cause="BatchNorm scales the whole centred output, (W x + b - mean) * s, so "
                 "the shift b - mean is scaled by s as the weight is", where=where)
        if close_values(got, bias_unscaled, atol=1e-5, rtol=1e-4):
            fail("bias-not-scaled", observed="the folded bias adds the Linear's bias b unscaled (the mean is "
                 "scaled)", expected="b' = (b - running_mean) * s + beta with s = gamma / sqrt(var + eps)",
                 cause="BatchNorm scales the whole centred output, (W x + b - mean) * s, so b is scaled by s "
                 "too", where=where)
        expect.close("the folded layer's output", got, want, atol=1e-5, rtol=1e-4, where=where,
                     cause="W' = W * s[:, None], b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps)")
    return "one Linear equal to Linear then BatchNorm in eval mode, eps included, the original untouched"


_FOLD_SOLUTION = '''import torch
from torch import nn


@torch.no_grad()
def fold_batchnorm(linear, bn):
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    fused = nn.Linear(linear.in_features, linear.out_features)
    fused.weight.copy_(linear.weight * scale[:, None])
    fused.bias.copy_((linear.bias - bn.running_mean) * scale + bn.bias)
    return fused
'''


def _judge_export(seen: dict, *, case: Case) -> str:
    where = "export_for_serving"
    if seen.get("type") != "ExportedProgram":
        fail("wrong-return", observed=f"export_for_serving returned a {seen.get('type')}",
             expected="the torch.export.ExportedProgram", cause="return what torch.export.export returns (its "
             ".module() is what gets called)", where=where)
    outputs = seen.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(_EXPORT_BATCHES):
        raise WireError("outputs missing")
    model = _trained(case, 530).eval()
    for batch, got in zip(_EXPORT_BATCHES, outputs, strict=True):
        if isinstance(got, str):
            fail("static-batch", observed=f"the exported program refused a batch of {batch}: {got}",
                 expected="any batch size", cause="without dynamic_shapes every size of the example input is "
                 "fixed in the graph", where="dynamic_shapes={'x': {0: Dim('batch')}} (name the forward's argument)")
        with torch.inference_mode():
            want = model(_inputs(case, 532 + batch, rows=batch))
        if isinstance(got, torch.Tensor) and got.shape == want.shape and not close_values(got, want, atol=1e-5,
                                                                                            rtol=1e-4, dtype=False):
            fail("train-mode-exported", observed=f"the exported program's output differs from the eval-mode model's "
                 f"(batch {batch})", expected="the eval-mode forward", cause="export traces the model in the mode it "
                 "is in: in train mode Dropout and batch-statistics BatchNorm are baked into the graph",
                 where="model.eval() before torch.export.export")
        expect.close(f"the exported program on a batch of {batch}", got, want, atol=1e-5, rtol=1e-4, where=where)
    return "an eval-mode program whose batch dimension is dynamic: batches of 1, 3 and 17 match the eager model"


_EXPORT_SOLUTION = '''import torch
from torch.export import Dim, export


def export_for_serving(model, example):
    model.eval()
    batch = Dim("batch")
    return export(model, (example,), dynamic_shapes={"x": {0: batch}})
'''


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
            (_SAVE_LOAD_SOLUTION.replace("weights_only=True", "weights_only=False"), "unsafe-load"),
            (_SAVE_LOAD_SOLUTION.replace("model.state_dict()}", "{k: v for k, v in model.named_parameters()}}")
             .replace("checkpoint[\"state_dict\"])", "checkpoint[\"state_dict\"], strict=False)"), "no-state-dict"),
        ),
        judge=_judge_save_load,
    )
)


add_answers(
    Answers(
        drill_id="export-predict-inference-mode",
        solution=_PREDICT_SOLUTION,
        wrong_answers=(
            (_PREDICT_SOLUTION.replace("    model.eval()\n", ""), "train-mode"),
            (_PREDICT_SOLUTION.replace("torch.inference_mode()", "torch.enable_grad()"), "grad-tracked"),
            (_PREDICT_SOLUTION.replace("torch.inference_mode()", "torch.no_grad()"), "not-inference-mode"),
            (_PREDICT_SOLUTION.replace(".softmax(dim=-1)", ""), "wrong-value"),
        ),
        judge=_judge_predict,
    )
)


add_answers(
    Answers(
        drill_id="export-parity-check",
        solution=_PARITY_SOLUTION,
        wrong_answers=(
            (_PARITY_SOLUTION.replace("        if got.shape != want.shape:\n            ok = False\n            "
                                      "continue\n", "").replace(
                "        within = error <= atol + rtol * want.abs()  # False where got is nan\n"
                "        ok = ok and bool(within.all())\n",
                "        ok = ok and torch.allclose(got, want, atol=atol, rtol=rtol)\n"), "shape-mismatch-accepted"),
            (_PARITY_SOLUTION.replace("ok = ok and bool(within.all())",
                                      "ok = ok and not bool((error > atol + rtol * want.abs()).any())"),
             "nan-accepted"),
            (_PARITY_SOLUTION.replace("within = error <= atol + rtol * want.abs()", "within = error <= atol"),
             "false-alarm"),
            (_PARITY_SOLUTION.replace("ok = ok and bool(within.all())",
                                      "ok = ok and bool(error.mean() <= atol + rtol * want.abs().mean())"),
             "missed-outlier"),
            (_PARITY_SOLUTION.replace("worst = max(worst, float(error.max()))",
                                      "worst = max(worst, float(error.mean()))"), "wrong-max-error"),
        ),
        judge=_judge_parity,
    )
)


add_answers(
    Answers(
        drill_id="export-latency-median",
        solution=_LATENCY_SOLUTION,
        wrong_answers=(
            (_LATENCY_SOLUTION.replace("    for _ in range(warmup):\n        fn()\n", ""), "wrong-call-count"),
            (_LATENCY_SOLUTION.replace("range(warmup)", "range(0)").replace("range(iters)", "range(warmup + iters)"),
             "warmup-timed"),
            (_LATENCY_SOLUTION.replace("statistics.median(times)", "statistics.mean(times)"), "mean-not-median"),
            ("import time\n\ndef measure_latency(fn, warmup, iters):\n    for _ in range(warmup):\n        fn()\n"
             "    start = time.perf_counter()\n    for _ in range(iters):\n        fn()\n"
             "    return (time.perf_counter() - start) / iters * 1000\n", "mean-not-median"),
            (_LATENCY_SOLUTION.replace(" * 1000.0", ""), "wrong-unit"),
        ),
        judge=_judge_latency,
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
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_EVAL).replace(", strict=False", ""), "raised"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_KEYS, _SERVE_FIX_EVAL).replace(
                "    with torch.inference_mode():\n        return", "    if True:\n        return"), "grad-tracked"),
        ),
        judge=_judge_serving,
    )
)


add_answers(
    choice_answers(
        "export-dynamic-batch-example",
        options=(
            ("It exports; the program then accepts any batch size, 1 included",
             "that is what happens with an example batch of 2 or more; with 1, export cannot keep the size symbolic"),
            ("It exports, but the program is fixed to batch 1 and rejects others",
             "a Dim that cannot stay dynamic is not silently fixed: export reports the conflict instead"),
            ("It raises: size 1 is specialised, conflicting with the declared Dim",
             "export treats sizes 0 and 1 as special (broadcasting, squeezes) and specialises them, which violates "
             "the Dim('batch') you declared; an example batch of 2 or more exports a truly dynamic batch"),
            ("It exports a program that recompiles itself for each new batch size",
             "an ExportedProgram is one fixed graph with symbolic sizes; it never recompiles (that is torch.compile)"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "export-dynamic-int8",
        options=(
            ("Every tensor, activations included, is int8 with ranges fixed in calibration",
             "that is static quantisation: it needs a calibration pass to fix the activation ranges in advance"),
            ("Accuracy is unchanged bit for bit: int8 represents float32 weights exactly",
             "int8 has 256 levels per scale: outputs differ slightly (the experiment prints the difference)"),
            ("The model trains faster on a GPU because the gradients are int8 as well",
             "dynamic quantisation is an inference transform for CPU kernels; it does not train nor run on CUDA"),
            ("Linear weights kept in int8 (~4x smaller); activations quantised per call",
             "the weights are quantised once; each call measures the activation range on the fly (hence "
             "'dynamic') and runs an int8 matmul: smaller, often faster on CPU, slightly less exact"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "export-torchscript-trace",
        options=(
            ("x * 2: tracing recorded the branch taken; use torch.export instead",
             "trace records the operations that ran for the example (only a TracerWarning marks the lost branch); "
             "TorchScript is in maintenance, and torch.export refuses or captures such branches explicitly"),
            ("-x: tracing compiles both branches, so behaviour matches eager mode",
             "that is what torch.jit.script does by compiling the source; trace only records what ran"),
            ("An error, because traced graphs check their inputs against the example",
             "a trace has no guards on values; it runs the recorded graph silently for any input of that shape"),
            ("x * 2, and torch.jit.script is the recommended modern replacement for it",
             "the first half is right, but TorchScript as a whole (script too) is in maintenance mode"),
        ),
        key="a",
    )
)


add_answers(
    choice_answers(
        "export-onnx-dynamic-axes",
        options=(
            ("It runs: ONNX Runtime broadcasts the batch dimension automatically",
             "ONNX Runtime checks inputs against the graph's declared shapes; it does not broadcast them"),
            ("It fails: the input is fixed at [1, 16] unless marked dynamic",
             "without dynamic_axes (or dynamic_shapes with the dynamo exporter) every size of the example is baked "
             "into the graph, so the runtime rejects a batch of 8"),
            ("It runs but returns only the first row's output, silently",
             "a shape mismatch is an error in ONNX Runtime, not a truncation"),
            ("It fails only on a GPU; the CPU provider accepts any batch size",
             "the input shapes belong to the graph, whatever the execution provider"),
        ),
        key="b",
    )
)


add_answers(
    Answers(
        drill_id="export-fold-batchnorm",
        solution=_FOLD_SOLUTION,
        wrong_answers=(
            (_FOLD_SOLUTION.replace("torch.sqrt(bn.running_var + bn.eps)", "torch.sqrt(bn.running_var)"),
             "eps-ignored"),
            (_FOLD_SOLUTION.replace("(linear.bias - bn.running_mean) * scale", "-bn.running_mean * scale"),
             "bias-dropped"),
            (_FOLD_SOLUTION.replace("torch.sqrt(bn.running_var + bn.eps)", "(torch.sqrt(bn.running_var) + bn.eps)"),
             "eps-outside-sqrt"),
            (_FOLD_SOLUTION.replace("(linear.bias - bn.running_mean) * scale + bn.bias",
                                    "linear.bias - bn.running_mean + bn.bias"), "bias-not-scaled"),
            (_FOLD_SOLUTION.replace("torch.sqrt(bn.running_var + bn.eps)", "(bn.running_var + bn.eps)"),
             "wrong-value"),
            (_FOLD_SOLUTION.replace("    fused = nn.Linear(linear.in_features, linear.out_features)\n",
                                    "    fused = linear\n")
             .replace("fused.weight.copy_(linear.weight * scale[:, None])", "fused.weight.mul_(scale[:, None])")
             .replace("fused.bias.copy_((linear.bias - bn.running_mean) * scale + bn.bias)",
                      "fused.bias.sub_(bn.running_mean).mul_(scale).add_(bn.bias)"), "mutated-input"),
        ),
        judge=_judge_fold,
    )
)


add_answers(
    Answers(
        drill_id="export-torch-export-dynamic-batch",
        solution=_EXPORT_SOLUTION,
        wrong_answers=(
            (_EXPORT_SOLUTION.replace(', dynamic_shapes={"x": {0: batch}}', ""), "static-batch"),
            (_EXPORT_SOLUTION.replace("    model.eval()\n", ""), "train-mode-exported"),
            (_EXPORT_SOLUTION.replace("}})\n", "}}).module()\n"), "wrong-return"),
        ),
        judge=_judge_export,
    )
)
