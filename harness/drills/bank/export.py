"""Drills on exporting and serving a model: state_dict + config checkpoints loaded with weights_only,
inference mode, parity checks, latency measurement, and explain drills on torch.export, dynamic int8
quantisation, TorchScript and ONNX.

torch.export itself costs about 2 s in a fresh checker process (importing torch._dynamo), over the budget of a
check, so it appears in explain drills, whose experiments run it, not in checks. ONNX export never runs here.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
import timeit
import warnings
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_values
from harness.contract.errors import explain
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, multiple_choice


class _ExportedClassifier(nn.Module):
    """Linear, BatchNorm1d (with "pretrained" statistics), ReLU, Dropout(0.5), Linear."""

    def __init__(self, d_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.5))
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def _config(case: Case) -> dict[str, int]:
    gen = torch.Generator().manual_seed(case.seeded(500))
    d_in, hidden, n_out = (int(v) for v in torch.randint(3, 12, (3,), generator=gen))
    return {"d_in": d_in, "hidden": hidden + 4, "n_out": n_out + 1}


def _trained(case: Case, base: int = 501) -> _ExportedClassifier:
    """The case's "trained" classifier (seeded weights, non-default BatchNorm statistics), in train mode."""
    config = _config(case)
    torch.manual_seed(case.seeded(base))
    model = _ExportedClassifier(**config)
    bn = model.body[1]
    gen = torch.Generator().manual_seed(case.seeded(base + 1))
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(config["hidden"], generator=gen) * 0.5)
        bn.running_var.copy_(torch.rand(config["hidden"], generator=gen) + 0.5)
    return model


def _inputs(case: Case, base: int, rows: int = 6) -> torch.Tensor:
    return torch.randn(rows, _config(case)["d_in"], generator=torch.Generator().manual_seed(case.seeded(base)))


def _reference_probs(case: Case, base: int = 501) -> torch.Tensor:
    model = _trained(case, base).eval()
    with torch.inference_mode():
        return model(_inputs(case, 510)).softmax(-1)


def _tensor_dict_or_none(value: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return value
    return None


class _LoadSpy:
    """Records the weights_only argument of every torch.load call (also where the answer imported `load`)."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.calls: list[str] = []

    def __enter__(self) -> _LoadSpy:
        self._real = real = torch.load

        def load(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(repr(kwargs.get("weights_only", "default")))
            return real(*args, **kwargs)

        torch.load = load
        self._patched = [name for name, value in self.namespace.items() if value is real]
        for name in self._patched:
            self.namespace[name] = load
        return self

    def __exit__(self, *exc: object) -> None:
        torch.load = self._real
        for name in self._patched:
            self.namespace[name] = self._real


def _judge_safe_load(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise WireError("torch.load calls missing")
    if "False" in calls:
        fail("unsafe-load", observed="torch.load(..., weights_only=False)",
             expected="weights_only=True (the default since PyTorch 2.6)",
             cause="weights_only=False unpickles arbitrary objects: loading a file from elsewhere can run its code; "
             "a checkpoint of tensors, numbers, strings and dicts never needs it", where=where)


# --- save a state_dict + config; load it with weights_only ------------------------------------------------------

def _probe_save_load(answer: dict, *, case: Case) -> dict:
    config = _config(case)
    model = _trained(case)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.pt")
        answer["save_model"](model, dict(config), path)
        try:
            seen["content"] = torch.load(path, weights_only=True)
        except Exception as error:  # a pickled module (or any object) refuses to load with weights_only
            seen["refused"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        torch.manual_seed(case.seeded(777))  # another init: a load that loads nothing shows
        with _LoadSpy(answer) as spy:
            try:
                loaded = answer["load_model"](path, _ExportedClassifier)
            except Exception as error:  # judged after what the file holds
                loaded, seen["load_error"] = None, explain(error)
    seen["load_calls"] = spy.calls
    seen["loaded_type"] = type(loaded).__name__
    if isinstance(loaded, nn.Module):
        loaded.eval()
        with torch.inference_mode():
            seen["out"] = loaded(_inputs(case, 510)).softmax(-1)
    return seen


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
    if not any(set(s) == set(want_state) and all(torch.equal(s[k], want_state[k]) for k in want_state)
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
    assert_close("the loaded model's probabilities", seen.get("out"), _reference_probs(case), atol=1e-5, rtol=1e-4,
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

add(
    Drill(
        id="export-state-dict-config",
        title="A checkpoint that loads safely: state_dict + config, weights_only",
        kind="write",
        topics=("export", "checkpointing"),
        difficulty=1,
        prompt="save_model(model, config, path) saves a model built as build(**config) (config: a dict of ints); "
        "load_model(path, build) returns an equal model. The file must load with torch.load(path, "
        "weights_only=True), so it may hold only tensors, numbers, strings and containers: no pickled module. "
        "Never load with weights_only=False.",
        entry="load_model",
        starter="import torch\n\n\ndef save_model(model, config, path):\n    raise NotImplementedError\n\n\n"
        "def load_model(path, build):\n    raise NotImplementedError\n",
        solution=_SAVE_LOAD_SOLUTION,
        hints=("torch.save(model) pickles the class; what does the loader need instead to rebuild the model?",
               "torch.save({'config': config, 'state_dict': model.state_dict()}, path); load with weights_only=True, "
               "build(**config), load_state_dict."),
        probe=_probe_save_load,
        judge=_judge_save_load,
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
    )
)


# --- inference: eval() and inference_mode -------------------------------------------------------------------

def _probe_predict(answer: dict, *, case: Case) -> dict:
    model = _trained(case)
    records: list[dict[str, bool]] = []

    def record(module: nn.Module, inputs: Any) -> None:
        records.append({"training": module.training, "grad_enabled": torch.is_grad_enabled(),
                        "inference_mode": torch.is_inference_mode_enabled()})

    handle = model.register_forward_pre_hook(record)
    try:
        out = answer["predict"](model, _inputs(case, 510))
    finally:
        handle.remove()
    return {"records": records, "out": out,
            "requires_grad": isinstance(out, torch.Tensor) and out.requires_grad}


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
    assert_close("predict(model, x)", seen.get("out"), _reference_probs(case), atol=1e-5, rtol=1e-4, where=where,
                 cause="the class probabilities are softmax(model(x), dim=-1)")
    return "eval mode, inference_mode, and the model's class probabilities"


_PREDICT_SOLUTION = '''import torch


def predict(model, x):
    model.eval()
    with torch.inference_mode():
        return model(x).softmax(dim=-1)
'''

add(
    Drill(
        id="export-predict-inference-mode",
        title="Inference done right: eval() and inference_mode",
        kind="write",
        topics=("export", "modules"),
        difficulty=1,
        prompt="predict(model, x) returns the class probabilities (softmax over the last dim) of a trained "
        "classifier that has Dropout and BatchNorm and arrives in train mode. Run it as a deployed model runs: "
        "in eval mode, under torch.inference_mode().",
        entry="predict",
        starter="import torch\n\n\ndef predict(model, x):\n    raise NotImplementedError\n",
        solution=_PREDICT_SOLUTION,
        hints=("Two separate switches: one changes what Dropout and BatchNorm do, the other what autograd records.",
               "model.eval(); with torch.inference_mode(): return model(x).softmax(dim=-1)"),
        probe=_probe_predict,
        judge=_judge_predict,
        wrong_answers=(
            (_PREDICT_SOLUTION.replace("    model.eval()\n", ""), "train-mode"),
            (_PREDICT_SOLUTION.replace("torch.inference_mode()", "torch.enable_grad()"), "grad-tracked"),
            (_PREDICT_SOLUTION.replace("torch.inference_mode()", "torch.no_grad()"), "not-inference-mode"),
            (_PREDICT_SOLUTION.replace(".softmax(dim=-1)", ""), "wrong-value"),
        ),
    )
)


# --- a parity checker, eager vs exported ----------------------------------------------------------------------

def _parity_scenarios(case: Case) -> tuple[list[dict[str, Any]], float, float]:
    """Each: reference outputs and candidate outputs for three inputs, atol, rtol (the probe wraps them in
    functions; the judge recomputes them)."""
    gen = torch.Generator().manual_seed(case.seeded(600))
    weight = torch.randn(5, 3, generator=gen)
    inputs = [torch.randn(4, 5, generator=gen) for _ in range(3)]
    reference = [x @ weight for x in inputs]
    atol, rtol = 1e-5, 1e-4
    noise = [torch.randn(r.shape, generator=gen) * 2e-6 for r in reference]

    def outs(changes: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        return [changes.get(i, r + n) for i, (r, n) in enumerate(zip(reference, noise, strict=True))]

    outlier = reference[2] + noise[2]
    small = int(reference[2].abs().argmin())  # one element 20x out of tolerance: a mean of the errors hides it
    outlier.view(-1)[small] = reference[2].view(-1)[small] + 20 * (atol + rtol * reference[2].view(-1)[small].abs())
    nan = reference[1].clone()
    nan[0, int(torch.randint(0, 3, (1,), generator=gen))] = float("nan")
    big_ref = [r * 1000 for r in reference]
    big_cand = [r * (1 + 5e-5) for r in big_ref]  # relative error 5e-5 < rtol: within tolerance
    return [
        {"label": "tiny noise", "inputs": inputs, "ref": reference, "cand": outs({})},
        {"label": "one outlier in the third input", "inputs": inputs, "ref": reference, "cand": outs({2: outlier})},
        {"label": "an extra leading dimension", "inputs": inputs, "ref": reference,
         "cand": outs({0: reference[0][None]})},
        {"label": "a nan", "inputs": inputs, "ref": reference, "cand": outs({1: nan})},
        {"label": "large values, small relative error", "inputs": inputs, "ref": big_ref, "cand": big_cand},
    ], atol, rtol


def _probe_parity(answer: dict, *, case: Case) -> dict:
    scenarios, atol, rtol = _parity_scenarios(case)
    results = []
    for s in scenarios:
        table_ref = {id(x): y for x, y in zip(s["inputs"], s["ref"], strict=True)}
        table_cand = {id(x): y for x, y in zip(s["inputs"], s["cand"], strict=True)}
        results.append(answer["check_parity"](lambda x, t=table_ref: t[id(x)].clone(),
                                              lambda x, t=table_cand: t[id(x)].clone(), s["inputs"], atol, rtol))
    return {"results": results}


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
                if not math.isclose(worst, want_worst, rel_tol=1e-4, abs_tol=1e-9):
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

add(
    Drill(
        id="export-parity-check",
        unjudged=("results/2/1", "results/3/1"),  # no max error is defined for a shape mismatch or a nan
        title="A parity check between an eager model and its export",
        kind="write",
        topics=("export", "debugging"),
        difficulty=2,
        prompt="check_parity(reference, candidate, inputs, atol, rtol) compares two callables (an eager model and "
        "its exported twin) on every input and returns (ok, max_abs_error). ok is True iff for every input the "
        "outputs have the same shape and every element satisfies |got - want| <= atol + rtol * |want| (a nan is "
        "never within tolerance). max_abs_error is the largest |got - want| over all inputs of matching shape.",
        entry="check_parity",
        starter="import torch\n\n\ndef check_parity(reference, candidate, inputs, atol, rtol):\n"
        "    raise NotImplementedError\n",
        solution=_PARITY_SOLUTION,
        hints=("Which of these does torch.allclose do silently: broadcast shapes, or check them? And what does "
               "nan > tol evaluate to?",
               "Per input: check shapes; within = |got - want| <= atol + rtol * |want|; ok requires within.all()."),
        probe=_probe_parity,
        judge=_judge_parity,
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
    )
)


# --- latency: warm-up, then the median ---------------------------------------------------------------------------

def _latency_plan(case: Case) -> tuple[int, int, list[float]]:
    """warmup, iters, and the duration in seconds of each call to fn (warm-up calls are slow, a few are outliers)."""
    gen = torch.Generator().manual_seed(case.seeded(700))
    warmup = int(torch.randint(3, 6, (1,), generator=gen))
    iters = 2 * int(torch.randint(4, 8, (1,), generator=gen)) + 1  # odd: one middle value
    slow = (0.05 + 0.03 * torch.rand(warmup, generator=gen)).tolist()
    steady = (0.002 + 0.002 * torch.rand(iters + 10, generator=gen)).tolist()
    for i in torch.randperm(iters, generator=gen)[:2].tolist():
        steady[i] = 0.04 + 0.01 * i  # outliers: a context switch, a GC pause
    return warmup, iters, slow + steady


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def seconds(self) -> float:
        return self.now

    def nanoseconds(self) -> int:
        return int(round(self.now * 1e9))


def _probe_latency(answer: dict, *, case: Case) -> dict:
    warmup, iters, durations = _latency_plan(case)
    clock = _FakeClock()
    calls = [0]

    def fn() -> torch.Tensor:
        if calls[0] >= len(durations):
            raise RuntimeError("fn was called far more than warmup + iters times")
        clock.now += durations[calls[0]]
        calls[0] += 1
        return torch.zeros(1)

    fakes = {"perf_counter": clock.seconds, "time": clock.seconds, "monotonic": clock.seconds,
             "perf_counter_ns": clock.nanoseconds, "time_ns": clock.nanoseconds, "monotonic_ns": clock.nanoseconds}
    real = {name: getattr(time, name) for name in fakes}
    real_default = timeit.default_timer
    by_identity = {id(func): fakes[name] for name, func in real.items()}
    rebound = {name: value for name, value in answer.items() if id(value) in by_identity}
    try:
        for name, fake in fakes.items():
            setattr(time, name, fake)
        timeit.default_timer = clock.seconds
        for name, value in rebound.items():
            answer[name] = by_identity[id(value)]
        result = answer["measure_latency"](fn, warmup, iters)
    finally:
        for name, func in real.items():
            setattr(time, name, func)
        timeit.default_timer = real_default
        answer.update(rebound)
    return {"result": result, "calls": calls[0]}


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
        return math.isclose(result, value, rel_tol=1e-6, abs_tol=1e-9)

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

add(
    Drill(
        id="export-latency-median",
        title="Measure latency: warm up, time each call, report the median",
        kind="write",
        topics=("export", "performance"),
        difficulty=2,
        prompt="measure_latency(fn, warmup, iters) calls fn() `warmup` times untimed, then times `iters` calls one "
        "by one with time.perf_counter (synchronising CUDA around each timed call when a GPU is present) and returns "
        "the median latency in milliseconds as a float.",
        entry="measure_latency",
        starter="import time\n\n\ndef measure_latency(fn, warmup, iters):\n    raise NotImplementedError\n",
        solution=_LATENCY_SOLUTION,
        hints=("Why are the first calls slower, and what does one 40 ms pause do to a mean of 3 ms calls?",
               "warm-up loop; per call: start = perf_counter(); fn(); append(perf_counter() - start); "
               "statistics.median(times) * 1000."),
        probe=_probe_latency,
        judge=_judge_latency,
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
    )
)


# --- difficulty 3: a serving script with three bugs --------------------------------------------------------------

def _probe_serving(answer: dict, *, case: Case) -> dict:
    model = _trained(case, 520)
    checkpoint = {"config": _config(case), "state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}
    seen: dict[str, Any] = {"loaded_states": [], "forwards": []}
    real_load_state_dict = nn.Module.load_state_dict

    def load_state_dict(module: nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_load_state_dict(module, state_dict, *args, **kwargs)
        seen["loaded_states"].append({k: v.detach().clone() for k, v in module.state_dict().items()})
        return result

    def forward_hook(module: nn.Module, inputs: Any) -> None:
        seen["forwards"].append({"module": type(module).__name__, "training": module.training})

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ddp_checkpoint.pt")
        torch.save(checkpoint, path)
        nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
        handle = torch.nn.modules.module.register_module_forward_pre_hook(forward_hook)
        torch.manual_seed(case.seeded(888))
        try:
            with _LoadSpy(answer) as spy:
                out = answer["load_and_predict"](path, _ExportedClassifier, _inputs(case, 510))
        finally:
            nn.Module.load_state_dict = real_load_state_dict  # type: ignore[method-assign]
            handle.remove()
    seen["load_calls"] = spy.calls
    seen["out"] = out
    seen["requires_grad"] = isinstance(out, torch.Tensor) and out.requires_grad
    return seen


def _judge_serving(seen: dict, *, case: Case) -> str:
    where = "load_and_predict"
    _judge_safe_load(seen.get("load_calls"), where)
    want_state = _trained(case, 520).state_dict()
    states = seen.get("loaded_states")
    if not isinstance(states, list):
        raise WireError("load records missing")
    loaded = [s for s in states if _tensor_dict_or_none(s) is not None and set(s) == set(want_state)]
    if not loaded or not all(torch.equal(loaded[-1][k], want_state[k]) for k in want_state):
        fail("weights-not-loaded", observed="after load_state_dict the model's weights are not the checkpoint's",
             expected="every tensor of the checkpoint in the model",
             cause="the checkpoint was saved from DDP: its keys start with 'module.', so nothing matched, and "
             "strict=False turned that into silence (random weights serve predictions)",
             where="strip the prefix (k.removeprefix('module.')) and load with strict=True")
    forwards = seen.get("forwards")
    if not isinstance(forwards, list) or not forwards:
        raise WireError("forward records missing")
    training = sorted({str(f.get("module")) for f in forwards
                       if isinstance(f, dict) and f.get("training") is not False})
    if training:
        fail("train-mode", observed=f"modules ran in train mode: {', '.join(training[:4])}",
             expected="model.eval() before serving", cause="Dropout drops features at random and BatchNorm uses "
             "batch statistics: each request gets a different answer", where="model.eval()")
    if seen.get("requires_grad") is True:
        fail("grad-tracked", observed="the returned probabilities require grad", expected="inference without autograd",
             cause="the forward ran outside torch.inference_mode()", where=where)
    assert_close("the served probabilities", seen.get("out"), _reference_probs(case, 520), atol=1e-5, rtol=1e-4,
                 where=where, cause="softmax of the loaded model in eval mode")
    return "a safe load, every weight in place despite the DDP prefix, eval mode, and the right probabilities"


_SERVING_STARTER = '''import torch


def load_and_predict(path, build, x):
    """Load a checkpoint written by a DDP training run and return the class probabilities for x."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    model = build(**checkpoint["config"])
    model.load_state_dict(checkpoint["state_dict"], strict=False)
    with torch.inference_mode():
        return model(x).softmax(dim=-1)
'''

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


add(
    Drill(
        id="export-serving-three-bugs",
        title="Bug hunt: a serving script with three bugs",
        kind="bughunt",
        topics=("export", "checkpointing", "debugging"),
        difficulty=3,
        prompt="load_and_predict(path, build, x) loads a checkpoint {'config', 'state_dict'} written by a DDP "
        "training run (the state_dict was saved from the DDP wrapper) and returns the class probabilities of the "
        "rebuilt model (Dropout, BatchNorm) for x. In service: a security review shows that a crafted checkpoint "
        "file runs its own code the moment this function loads it; the probabilities are those of an untrained "
        "model (accuracy at chance with a checkpoint that scores 95% in training), with no error or warning; and "
        "two calls on the same x return different probabilities. Three bugs cause this; fix all three (the check "
        "reports the first problem it observes).",
        entry="load_and_predict",
        starter=_SERVING_STARTER,
        solution=_SERVING_SOLUTION,
        hints=("Ask of each line: is loading safe? did every weight really load (what are the checkpoint's keys)? "
               "in which mode does the model run?",
               "weights_only=True; strip 'module.' from the keys and load strictly; model.eval() before the forward."),
        probe=_probe_serving,
        judge=_judge_serving,
        wrong_answers=(
            (_serve_fixed(_SERVE_FIX_KEYS, _SERVE_FIX_EVAL), "unsafe-load"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_EVAL), "weights-not-loaded"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_KEYS), "train-mode"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_EVAL).replace(", strict=False", ""), "raised"),
            (_serve_fixed(_SERVE_FIX_LOAD, _SERVE_FIX_KEYS, _SERVE_FIX_EVAL).replace(
                "    with torch.inference_mode():\n        return", "    if True:\n        return"), "grad-tracked"),
        ),
    )
)


# --- explain drills -------------------------------------------------------------------------------------------

def _tiny_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


def _export_batch_one_experiment() -> None:
    from torch.export import Dim, export

    model = _tiny_mlp()
    try:
        export(model, (torch.randn(1, 16),), dynamic_shapes={"input": {0: Dim("batch")}})
        print("example batch 1: exported")
    except Exception as error:  # the constraint violation this drill is about
        print(f"example batch 1 with Dim('batch'): {type(error).__name__}: {str(error).splitlines()[0]}")
    program = export(model, (torch.randn(2, 16),), dynamic_shapes={"input": {0: Dim("batch")}})
    for batch in (1, 7, 64):
        shape = tuple(program.module()(torch.randn(batch, 16)).shape)
        print(f"example batch 2, called with batch {batch}: output {shape}")


add(
    multiple_choice(
        id="export-dynamic-batch-example",
        title="torch.export with a dynamic batch and an example of batch 1",
        topics=("export",),
        difficulty=2,
        question="You call torch.export.export(model, (torch.randn(1, 16),), dynamic_shapes={'input': {0: "
        "Dim('batch')}}) on a small MLP, to serve any batch size. What happens?",
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
        hints=("Which sizes does the tracer treat as special because they broadcast?",
               "Run the experiment: batch 1 vs batch 2 as the example."),
        experiment=_export_batch_one_experiment,
    )
)


def _quantize_experiment() -> None:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    floats = sum(p.numel() * p.element_size() for p in model.parameters())
    int8 = sum(m.weight.numel() for m in model if isinstance(m, nn.Linear)) + sum(
        m.bias.numel() * 4 for m in model if isinstance(m, nn.Linear))
    print(f"float32 weights: {floats / 1024:.0f} KiB; int8 weights + float biases: {int8 / 1024:.0f} KiB "
          f"({floats / int8:.1f}x smaller)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated in favour of torchao
            quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
            x = torch.randn(8, 256)
            error = (quantized(x) - model(x)).abs().max().item()
        print(f"quantize_dynamic: {quantized[0]}; largest output difference {error:.4f}")
    except Exception as problem:  # the deprecated API may be gone in a later PyTorch
        print(f"quantize_dynamic is not available here ({type(problem).__name__}); torchao's quantize_ replaces it")
    print("Weights are stored in int8; activations are quantised on the fly at each call (dynamic), on the CPU.")


add(
    multiple_choice(
        id="export-dynamic-int8",
        title="What dynamic int8 quantisation changes",
        topics=("export", "performance"),
        difficulty=2,
        question="You apply dynamic int8 quantisation (torch.ao.quantization.quantize_dynamic with {nn.Linear}, "
        "or torchao's equivalent) to a trained MLP served on a CPU. Which describes the result?",
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
        hints=("What is quantised once, and what is quantised at every call?",
               "'Dynamic' refers to the activations' scale, computed per call."),
        experiment=_quantize_experiment,
    )
)


def _trace_experiment() -> None:
    def branchy(x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return -x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TracerWarning this drill is about, and jit's deprecation notice
        traced = torch.jit.trace(branchy, torch.ones(3))
    negative = -torch.ones(3)
    print(f"eager  branchy(-1s) = {branchy(negative).tolist()}")
    print(f"traced branchy(-1s) = {traced(negative).tolist()}  (the branch of the example input, baked in)")
    print("TorchScript (trace and script) is in maintenance: new export work goes through torch.export.")


add(
    multiple_choice(
        id="export-torchscript-trace",
        title="TorchScript tracing and data-dependent control flow",
        topics=("export", "debugging"),
        difficulty=2,
        question="A legacy deployment uses torch.jit.trace on a function with `if x.sum() > 0: return x * 2` "
        "`else: return -x`, traced with a positive example. In production it receives a negative input. What "
        "does the traced function return, and what is the modern replacement?",
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
        hints=("Does a trace see the Python `if`, or only the tensor operations that ran?",
               "Run the experiment: eager and traced outputs on a negative input."),
        experiment=_trace_experiment,
    )
)


def _onnx_axes_experiment() -> None:
    from torch.export import export

    model = _tiny_mlp()
    program = export(model, (torch.randn(1, 16),))  # no dynamic shapes: the batch size is part of the graph
    print(f"exported with batch 1, input spec: {program.graph_signature.user_inputs} "
          f"shape {tuple(program.example_inputs[0][0].shape)}")
    try:
        program.module()(torch.randn(8, 16))
        print("called with batch 8: ran")
    except Exception as error:  # the fixed batch this drill is about
        print(f"called with batch 8: {type(error).__name__}: {str(error).splitlines()[0]}")
    print("An ONNX graph exported the same way fixes the input as [1, 16]: an ONNX runtime rejects batch 8 just as "
          "this program does. Declare the batch dynamic (dynamic_axes, or dynamic_shapes with dynamo=True).")


add(
    multiple_choice(
        id="export-onnx-dynamic-axes",
        title="ONNX export and the batch dimension",
        topics=("export",),
        difficulty=1,
        question="You export a model with torch.onnx.export(model, (torch.randn(1, 16),), 'model.onnx') and no "
        "dynamic_axes / dynamic_shapes, then run it in ONNX Runtime on a batch of 8. What happens?",
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
        hints=("Where does the exported graph get its input shapes from when you declare nothing?",
               "The example input's sizes become the graph's, unless marked dynamic."),
        experiment=_onnx_axes_experiment,
    )
)


# --- fold BatchNorm into the preceding Linear for inference -------------------------------------------------------

def _fold_setup(case: Case) -> tuple[nn.Linear, nn.BatchNorm1d, torch.Tensor]:
    gen = torch.Generator().manual_seed(case.seeded(800))
    d_in, d_out = (int(v) for v in torch.randint(3, 10, (2,), generator=gen))
    eps = 0.01 + 0.09 * float(torch.rand(1, generator=gen))  # large enough that forgetting it shows
    torch.manual_seed(case.seeded(801))
    linear, bn = nn.Linear(d_in, d_out), nn.BatchNorm1d(d_out, eps=eps)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(d_out, generator=gen))
        bn.running_var.copy_(torch.rand(d_out, generator=gen) * 0.2 + 0.01)
        bn.weight.copy_(torch.rand(d_out, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(d_out, generator=gen))
    return linear, bn, torch.randn(7, d_in, generator=gen)


def _probe_fold(answer: dict, *, case: Case) -> dict:
    linear, bn, x = _fold_setup(case)
    before = {"weight": linear.weight.detach().clone(), "bias": linear.bias.detach().clone()}
    fused = answer["fold_batchnorm"](linear, bn)
    seen: dict[str, Any] = {"type": type(fused).__name__,
                            "linear_changed": not (torch.equal(linear.weight, before["weight"])
                                                   and torch.equal(linear.bias, before["bias"]))}
    if isinstance(fused, nn.Module):
        with torch.inference_mode():
            seen["out"] = fused(x)
    return seen


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
        assert_close("the folded layer's output", got, want, atol=1e-5, rtol=1e-4, where=where,
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

add(
    Drill(
        id="export-fold-batchnorm",
        title="Fold a BatchNorm into the Linear before it",
        kind="write",
        topics=("export", "performance"),
        difficulty=2,
        prompt="fold_batchnorm(linear, bn) returns a new nn.Linear equal to bn(linear(x)) with bn in eval mode "
        "(its running statistics, affine weight and bias, and its eps), so that the deployed model runs one layer "
        "instead of two. Leave linear and bn unchanged.",
        entry="fold_batchnorm",
        starter="import torch\nfrom torch import nn\n\n\ndef fold_batchnorm(linear, bn):\n"
        "    raise NotImplementedError\n",
        solution=_FOLD_SOLUTION,
        hints=("In eval mode BatchNorm is an affine map per feature: y = (z - mean) * s + beta. Substitute "
               "z = W x + b.",
               "s = gamma / sqrt(running_var + eps); W' = W * s[:, None]; b' = (b - running_mean) * s + beta."),
        probe=_probe_fold,
        judge=_judge_fold,
        wrong_answers=(
            (_FOLD_SOLUTION.replace("torch.sqrt(bn.running_var + bn.eps)", "torch.sqrt(bn.running_var)"),
             "eps-ignored"),
            (_FOLD_SOLUTION.replace("(linear.bias - bn.running_mean) * scale", "-bn.running_mean * scale"),
             "bias-dropped"),
            (_FOLD_SOLUTION.replace("torch.sqrt(bn.running_var + bn.eps)", "(bn.running_var + bn.eps)"),
             "wrong-value"),
            (_FOLD_SOLUTION.replace("    fused = nn.Linear(linear.in_features, linear.out_features)\n",
                                    "    fused = linear\n")
             .replace("fused.weight.copy_(linear.weight * scale[:, None])", "fused.weight.mul_(scale[:, None])")
             .replace("fused.bias.copy_((linear.bias - bn.running_mean) * scale + bn.bias)",
                      "fused.bias.sub_(bn.running_mean).mul_(scale).add_(bn.bias)"), "mutated-input"),
        ),
    )
)


# --- torch.export with a dynamic batch dimension ------------------------------------------------------------------

_EXPORT_BATCHES = (3, 1, 17)


def _probe_export(answer: dict, *, case: Case) -> dict:
    model = _trained(case, 530)  # arrives in train mode, as it leaves the training loop
    program = answer["export_for_serving"](model, _inputs(case, 531, rows=4))
    seen: dict[str, Any] = {"type": type(program).__name__, "outputs": []}
    module = program.module() if hasattr(program, "module") else None
    for batch in _EXPORT_BATCHES:
        x = _inputs(case, 532 + batch, rows=batch)
        try:
            seen["outputs"].append(module(x) if module is not None else None)
        except Exception as error:  # a program exported for one batch size refuses the others
            seen["outputs"].append(f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
    return seen


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
        if isinstance(got, torch.Tensor) and got.shape == want.shape and not torch.allclose(got, want, atol=1e-5,
                                                                                            rtol=1e-4):
            fail("train-mode-exported", observed=f"the exported program's output differs from the eval-mode model's "
                 f"(batch {batch})", expected="the eval-mode forward", cause="export traces the model in the mode it "
                 "is in: in train mode Dropout and batch-statistics BatchNorm are baked into the graph",
                 where="model.eval() before torch.export.export")
        assert_close(f"the exported program on a batch of {batch}", got, want, atol=1e-5, rtol=1e-4, where=where)
    return "an eval-mode program whose batch dimension is dynamic: batches of 1, 3 and 17 match the eager model"


_EXPORT_SOLUTION = '''import torch
from torch.export import Dim, export


def export_for_serving(model, example):
    model.eval()
    batch = Dim("batch")
    return export(model, (example,), dynamic_shapes={"x": {0: batch}})
'''

add(
    Drill(
        id="export-torch-export-dynamic-batch",
        title="torch.export with a dynamic batch dimension",
        kind="write",
        topics=("export",),
        difficulty=2,
        prompt="export_for_serving(model, example) exports a trained classifier (Dropout, BatchNorm; its forward is "
        "forward(self, x)) with torch.export.export, from an example batch of 4, so that the program's .module() "
        "serves any batch size with the outputs of the model in eval mode. Return the ExportedProgram.",
        entry="export_for_serving",
        starter="import torch\nfrom torch.export import Dim, export\n\n\ndef export_for_serving(model, example):\n"
        "    raise NotImplementedError\n",
        solution=_EXPORT_SOLUTION,
        hints=("Two things are fixed at export time unless you say otherwise: the module's mode, and every size of "
               "the example input.",
               "model.eval(); export(model, (example,), dynamic_shapes={'x': {0: Dim('batch')}})."),
        probe=_probe_export,
        judge=_judge_export,
        wrong_answers=(
            (_EXPORT_SOLUTION.replace(', dynamic_shapes={"x": {0: batch}}', ""), "static-batch"),
            (_EXPORT_SOLUTION.replace("    model.eval()\n", ""), "train-mode-exported"),
            (_EXPORT_SOLUTION.replace("}})\n", "}}).module()\n"), "wrong-return"),
        ),
    )
)
