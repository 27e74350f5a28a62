"""Export drills on parity: a parity check, a latency median, a folded BatchNorm, torch.export with a dynamic batch."""

from __future__ import annotations

import statistics

import torch

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_values, isclose_number, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.export import (
    EXPORT_BATCHES,
    export_inputs,
    fold_setup,
    latency_plan,
    parity_scenarios,
    trained_classifier,
)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_parity(seen: dict, *, case: Case) -> str:
    where = "check_parity"
    scenarios, atol, rtol = parity_scenarios(case)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != len(scenarios):
        malformed("results missing")
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
    warmup, iters, durations = latency_plan(case)
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


def _judge_fold(seen: dict, *, case: Case) -> str:
    where = "fold_batchnorm"
    linear, bn, x = fold_setup(case)
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
    if not isinstance(outputs, list) or len(outputs) != len(EXPORT_BATCHES):
        malformed("outputs missing")
    model = trained_classifier(case, 530).eval()
    for batch, got in zip(EXPORT_BATCHES, outputs, strict=True):
        if isinstance(got, str):
            fail("static-batch", observed=f"the exported program refused a batch of {batch}: {got}",
                 expected="any batch size", cause="without dynamic_shapes every size of the example input is "
                 "fixed in the graph", where="dynamic_shapes={'x': {0: Dim('batch')}} (name the forward's argument)")
        with torch.inference_mode():
            want = model(export_inputs(case, 532 + batch, rows=batch))
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
        drill_id="export-parity-check",
        solution=_PARITY_SOLUTION,
        wrong_answers=(
            (edited(_PARITY_SOLUTION,
                    ("        if got.shape != want.shape:\n            ok = False\n            "
                     "continue\n",
                     ""),
                    ("        within = error <= atol + rtol * want.abs()  # False where got is nan\n"
                     "        ok = ok and bool(within.all())\n",
                     "        ok = ok and torch.allclose(got, want, atol=atol, rtol=rtol)\n")),
             "shape-mismatch-accepted"),
            (edited(_PARITY_SOLUTION,
                    ("ok = ok and bool(within.all())",
                     "ok = ok and not bool((error > atol + rtol * want.abs()).any())")),
             "nan-accepted"),
            (edited(_PARITY_SOLUTION,
                    ("within = error <= atol + rtol * want.abs()", "within = error <= atol")),
             "false-alarm"),
            (edited(_PARITY_SOLUTION,
                    ("ok = ok and bool(within.all())",
                     "ok = ok and bool(error.mean() <= atol + rtol * want.abs().mean())")),
             "missed-outlier"),
            (edited(_PARITY_SOLUTION,
                    ("worst = max(worst, float(error.max()))",
                     "worst = max(worst, float(error.mean()))")), "wrong-max-error"),
        ),
        judge=_judge_parity,
    )
)


add_answers(
    Answers(
        drill_id="export-latency-median",
        solution=_LATENCY_SOLUTION,
        wrong_answers=(
            (edited(_LATENCY_SOLUTION, ("    for _ in range(warmup):\n        fn()\n", "")), "wrong-call-count"),
            (edited(_LATENCY_SOLUTION,
                    ("range(warmup)", "range(0)"),
                    ("range(iters)", "range(warmup + iters)")),
             "warmup-timed"),
            (edited(_LATENCY_SOLUTION, ("statistics.median(times)", "statistics.mean(times)")), "mean-not-median"),
            ("import time\n\ndef measure_latency(fn, warmup, iters):\n    for _ in range(warmup):\n        fn()\n"
             "    start = time.perf_counter()\n    for _ in range(iters):\n        fn()\n"
             "    return (time.perf_counter() - start) / iters * 1000\n", "mean-not-median"),
            (edited(_LATENCY_SOLUTION, (" * 1000.0", "")), "wrong-unit"),
        ),
        judge=_judge_latency,
    )
)


add_answers(
    Answers(
        drill_id="export-fold-batchnorm",
        solution=_FOLD_SOLUTION,
        wrong_answers=(
            (edited(_FOLD_SOLUTION,
                    ("torch.sqrt(bn.running_var + bn.eps)", "torch.sqrt(bn.running_var)")),
             "eps-ignored"),
            (edited(_FOLD_SOLUTION,
                    ("(linear.bias - bn.running_mean) * scale", "-bn.running_mean * scale")),
             "bias-dropped"),
            (edited(_FOLD_SOLUTION,
                    ("torch.sqrt(bn.running_var + bn.eps)", "(torch.sqrt(bn.running_var) + bn.eps)")),
             "eps-outside-sqrt"),
            (edited(_FOLD_SOLUTION,
                    ("(linear.bias - bn.running_mean) * scale + bn.bias",
                     "linear.bias - bn.running_mean + bn.bias")), "bias-not-scaled"),
            (edited(_FOLD_SOLUTION,
                    ("torch.sqrt(bn.running_var + bn.eps)", "(bn.running_var + bn.eps)")),
             "wrong-value"),
            (edited(_FOLD_SOLUTION,
                    ("    fused = nn.Linear(linear.in_features, linear.out_features)\n",
                     "    fused = linear\n"),
                    ("fused.weight.copy_(linear.weight * scale[:, None])",
                     "fused.weight.mul_(scale[:, None])"),
                    ("fused.bias.copy_((linear.bias - bn.running_mean) * scale + bn.bias)",
                     "fused.bias.sub_(bn.running_mean).mul_(scale).add_(bn.bias)")), "mutated-input"),
        ),
        judge=_judge_fold,
    )
)


add_answers(
    Answers(
        drill_id="export-torch-export-dynamic-batch",
        solution=_EXPORT_SOLUTION,
        wrong_answers=(
            (edited(_EXPORT_SOLUTION, (', dynamic_shapes={"x": {0: batch}}', "")), "static-batch"),
            (edited(_EXPORT_SOLUTION, ("    model.eval()\n", "")), "train-mode-exported"),
            (edited(_EXPORT_SOLUTION, ("}})\n", "}}).module()\n")), "wrong-return"),
        ),
        judge=_judge_export,
    )
)
