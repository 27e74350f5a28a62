"""Checks of lesson 01, tensors and autograd: views, broadcasting, stable reductions, gradients, Functions.

Each probe runs the student's object on inputs seeded from the case and records what came back (results,
gradients, the inputs as they were left); each judge rebuilds the same inputs, computes the reference
itself (in float64 where precision matters) and decides. The hidden variant uses other shapes, dtypes and
edge cases. The visible case already holds every edge case the exercise texts state (memory layouts, huge
and masked inputs, matrices, large magnitudes), so that a hidden failure is never the first sign of one.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

import torch
import torch.nn.functional as F

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.forbidden import CallRecorder, forbid
from harness.contract.registry import judges, register
from harness.contract.wire import WireError, type_name


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def _max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference (inf where the shapes differ or a value is not finite)."""
    if a.shape != b.shape:
        return float("inf")
    return float((a.detach().double() - b.detach().double()).abs().nan_to_num(float("inf")).max()) if a.numel() else 0.0


def _require_tensor(result: Any, what: str, where: str) -> torch.Tensor:
    """`result` if it is a tensor; otherwise fail with [not-a-tensor]."""
    if not isinstance(result, torch.Tensor):
        fail("not-a-tensor", observed=f"{what} returned {type_name(result)}", expected="a torch.Tensor",
             cause="a missing return statement, or a conversion to NumPy or a Python list", where=where)
    return result


def _malformed(what: str) -> NoReturn:
    """Refuse an observation no probe of this module writes."""
    raise WireError(f"malformed observation: {what}")


def _recorded_tensor(entry: dict, key: str) -> torch.Tensor:
    """A tensor the probe itself recorded (not a student's return value); anything else is malformed."""
    value = entry[key]
    if not isinstance(value, torch.Tensor):
        _malformed(f"{key} is not a tensor")
    return value


# --------------------------------------------------------------------------------------------- 01-to-tokens
def _reference_tokens(images: torch.Tensor) -> torch.Tensor:
    return images.flatten(2).transpose(1, 2)


def _token_inputs(case: Case) -> list[torch.Tensor]:
    """Images to tokenise in every memory layout: contiguous, cropped, channels-last and strided (other
    shapes hidden, single pixels and single channels among them)."""
    shapes = ([(2, 3, 4, 5), (1, 4, 2, 2), (1, 1, 3, 1)] if not case.hidden
              else [(3, 8, 2, 7), (1, 1, 1, 1), (2, 5, 3, 1)])
    inputs = []
    for index, shape in enumerate(shapes):
        images = _randn(*shape, seed=case.seeded(index + (100 if case.hidden else 0)))
        # A crop of wider images: rows no longer back to back in memory.
        inputs += [images, _randn(*shape[:3], shape[3] + 3, seed=case.seeded(index + 7))[..., : shape[3]],
                   images.contiguous(memory_format=torch.channels_last),
                   _randn(*shape[:2], 2 * shape[2], shape[3], seed=case.seeded(9))[:, :, ::2]]
    return inputs


@register("01-to-tokens", hints=Hints(
    nudge="Bring the channel axis last first, then merge H and W. Only one of view/reshape works after a permute.",
    concept="permute moves the axes (a view with new strides); view() can only reinterpret memory whose strides "
            "allow it, while reshape() copies when it must. Merging axes without permuting regroups the numbers "
            "in memory order.",
    solution="n, c, h, w = images.shape; return images.permute(0, 2, 3, 1).reshape(n, h * w, c)",
    section="2. Views and copies"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor",
                                    hint="What does your function return? Keep the result a tensor (no .numpy())."),
        "view-on-non-contiguous": Requirement(
            "works for any input memory layout (cropped, channels-last, strided)",
            hint="Print images.permute(0, 2, 3, 1).is_contiguous(): which of view and reshape accepts that?"),
        "input-modified": Requirement(
            "does not modify its input",
            hint="Which of your operations end in an underscore? Those change the tensor they are called on."),
        "wrong-shape": Requirement("returns shape (N, H*W, C)",
                                   hint="Print the shape you return for a (2, 3, 4, 5) input: is it (2, 20, 3)?"),
        "wrong-order": Requirement(
            "token h*W + w holds the C channel values of pixel (h, w)",
            hint="Compare tokens[0, 0] with images[0, :, 0, 0]: are they the same C numbers?"),
    })
def probe_to_tokens(to_tokens: Callable[[torch.Tensor], torch.Tensor], *, case: Case) -> dict:
    """Tokenise each input; record the tokens and the input as left, stopping at a view() error."""
    results: list[dict] = []
    for x in _token_inputs(case):
        try:
            tokens = to_tokens(x)
        except RuntimeError as error:
            if "view" not in str(error):
                raise
            results.append({"view_error": str(error)[:500]})
            break
        results.append({"tokens": tokens, "input_after": x})
    return {"results": results}


@judges("01-to-tokens")
def judge_to_tokens(seen: dict, *, case: Case) -> str:
    """`to_tokens(images)` is (N, H*W, C) with token h*W + w the channel vector of pixel (h, w), input untouched."""
    for x, entry in zip(_token_inputs(case), seen["results"], strict=True):
        if "view_error" in entry:
            fail("view-on-non-contiguous", observed=f"to_tokens raised RuntimeError: {entry['view_error']}",
                 expected="a (N, H*W, C) tensor for any input layout",
                 cause="view() only reinterprets the existing memory: after permute()/transpose(), or on an input "
                       "that is not contiguous (a crop, channels-last), the strides do not allow the new shape",
                 where="use reshape() (copies when it must) instead of view()")
        tokens = _require_tensor(entry["tokens"], "to_tokens", "the return statement of to_tokens")
        after = _recorded_tensor(entry, "input_after")
        if after.shape != x.shape or not torch.equal(after, x):
            fail("input-modified", observed="the input images changed", expected="the input left untouched",
                 cause="an in-place operation on the input (a method ending in _, such as transpose_)",
                 where="use out-of-place operations in to_tokens")
        n, c, h, w = x.shape
        if tuple(tokens.shape) != (n, h * w, c):
            fail("wrong-shape", observed=f"shape {tuple(tokens.shape)} for input {tuple(x.shape)}",
                 expected=f"{(n, h * w, c)} = (N, H*W, C)",
                 cause="the axes are merged or ordered differently from (N, H*W, C)",
                 where="the permute order and the reshape sizes in to_tokens")
        if not torch.equal(tokens, _reference_tokens(x)):
            reinterpreted = torch.equal(tokens, x.reshape(n, h * w, c))
            fail("wrong-order",
                 observed="right shape, but tokens[n, h*W + w] is not the channel vector images[n, :, h, w]"
                          + (" (your result equals images.reshape(N, H*W, C))" if reinterpreted else ""),
                 expected="tokens[n, h*W + w, c] == images[n, c, h, w]",
                 cause="reshape/view without permute regroups the numbers in memory order: each 'token' "
                       "then mixes one channel's neighbouring pixels instead of holding one pixel's channels",
                 where="permute the channel axis to the end before merging H and W")
    return ("(N, C, H, W) -> (N, H*W, C) with each token the channel vector of one pixel, for contiguous, cropped, "
            "channels-last and strided inputs")


# -------------------------------------------------------------------------------------- 01-pairwise-distances
def _reference_distances(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.double()[:, None, :] - y.double()[None, :, :]).pow(2).sum(-1).sqrt()


# More torch calls than this in one pairwise_distances call means a Python loop: a broadcast needs about ten.
_LOOP_CALLS = 25


def _distance_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) pairs: float32 and float64, single rows, and a set of points against itself."""
    seed = case.seeded
    if not case.hidden:
        same = _randn(30, 3, seed=seed(2)) * 3
        return [(_randn(5, 3, seed=seed(0)), _randn(7, 3, seed=seed(1))),
                (_randn(4, 2, seed=seed(3), dtype=torch.float64), _randn(6, 2, seed=seed(4), dtype=torch.float64)),
                (same, same), (_randn(1, 1, seed=seed(5)), _randn(4, 1, seed=seed(6)))]
    same = _randn(50, 8, seed=seed(14)) * 10
    return [(_randn(1, 1, seed=seed(10)), _randn(4, 1, seed=seed(11))),
            (_randn(9, 16, seed=seed(12), dtype=torch.float64), _randn(2, 16, seed=seed(13), dtype=torch.float64)),
            (same, same.clone()),
            (_randn(6, 4, seed=seed(15)), _randn(1, 4, seed=seed(16)))]


@register("01-pairwise-distances", nonfinite=('results/*',), hints=Hints(
    nudge="Give x a new axis so that x is (n, 1, d) and y is (1, m, d): their difference broadcasts to (n, m, d).",
    concept="Broadcasting aligns shapes from the right and stretches the axes of size 1, so one subtraction "
            "computes every x_i - y_j; reduce over the feature axis only. If you use |x|^2 - 2 x.y + |y|^2, clamp "
            "it at 0 before the square root.",
    solution="return (x[:, None, :] - y[None, :, :]).pow(2).sum(dim=-1).sqrt()",
    section="3. Broadcasting"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor", hint="Keep the result a tensor: no .tolist()."),
        "wrong-shape": Requirement("returns the (n, m) matrix: one distance per (row of x, row of y)",
                                   hint="Write the shape of each intermediate for x (5, 3) and y (7, 3)."),
        "dtype-changed": Requirement("keeps the inputs' dtype",
                                     hint="Call it on two float64 tensors and print the result's dtype."),
        "non-finite": Requirement("the distance of a point to itself is 0, not nan",
                                  hint="Can a squared distance computed by your formula come out slightly "
                                       "negative? What is the square root of that?"),
        "wrong-values": Requirement("D[i, j] is the Euclidean distance ||x[i] - y[j]||",
                                    hint="Check D[0, 0] by hand against (x[0] - y[0]).norm()."),
        "python-loop": Requirement("uses no Python loop (one broadcast operation)",
                                   hint="How many tensor operations does your function run for 30 points? One "
                                        "broadcast subtraction can replace every iteration."),
    })
def probe_pairwise_distances(pairwise_distances: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                             case: Case) -> dict:
    """Record the student's distances for each (x, y) pair of the case, and how many torch calls each made."""
    results, calls = [], []
    for x, y in _distance_inputs(case):
        with CallRecorder() as counter:
            results.append(pairwise_distances(x, y))
        calls.append(counter.count)
    return {"results": results, "calls": calls}


@judges("01-pairwise-distances")
def judge_pairwise_distances(seen: dict, *, case: Case) -> str:
    """`pairwise_distances(x, y)` is the (n, m) matrix of Euclidean distances, in the inputs' dtype, finite,
    computed without a Python loop."""
    inputs = _distance_inputs(case)
    calls = seen["calls"]
    if not (isinstance(calls, list) and len(calls) == len(inputs) and all(type(c) is int for c in calls)):
        _malformed("the call counts")
    for (x, y), result, count in zip(inputs, seen["results"], calls, strict=True):
        result = _require_tensor(result, "pairwise_distances", "the return statement")
        n, m = x.shape[0], y.shape[0]
        if count > _LOOP_CALLS:
            fail("python-loop", observed=f"pairwise_distances on x {tuple(x.shape)} and y {tuple(y.shape)} ran "
                 f"{count} torch operations",
                 expected=f"a handful (a broadcast computes all {n * m} distances in about ten)",
                 cause="a Python loop over the rows of x or y (or over both), running small tensor operations at "
                       "each step",
                 where="replace the loop by x[:, None, :] - y[None, :, :], which is (n, m, d)")
        if tuple(result.shape) != (n, m):
            fail("wrong-shape", observed=f"shape {tuple(result.shape)} for x {tuple(x.shape)} and y {tuple(y.shape)}",
                 expected=f"({n}, {m}): one distance per (row of x, row of y)",
                 cause="the new axes are in the wrong place, or the sum runs over the wrong dimension",
                 where="x[:, None, :] - y[None, :, :] is (n, m, d); reduce over the last dimension only")
        if result.dtype != x.dtype:
            fail("dtype-changed", observed=f"{x.dtype} inputs gave a {result.dtype} result",
                 expected=f"a {x.dtype} result",
                 cause="a .float()/.double() conversion or a new tensor of the default dtype",
                 where="keep every intermediate in the inputs' dtype")
        if not torch.isfinite(result).all():
            fail("non-finite", observed="nan or inf distances (for example between identical points)",
                 expected="finite distances, 0 between a point and itself",
                 cause="the |x|^2 - 2 x.y + |y|^2 form rounding to a tiny negative number (sqrt of it is nan), "
                       "or a division by a distance that is 0",
                 where="clamp the squared distances at 0 (clamp_min(0)) before sqrt, or use the difference form")
        reference = _reference_distances(x, y)
        scale = float(torch.cat([x, y]).double().norm(dim=1).max())
        atol = (3e-3 if x.dtype == torch.float32 else 1e-6) * max(scale, 1.0)
        error = _max_error(result, reference)
        if error > atol:
            squared = _max_error(result, reference.pow(2)) <= atol * max(scale, 1.0)
            fail("wrong-values", observed=f"largest error {error:.3g} against the Euclidean distance"
                 + (" (you returned squared distances)" if squared else ""),
                 expected=f"errors below {atol:.2g}",
                 cause="the square root is missing" if squared else
                 "the difference or the reduction is over the wrong axis",
                 where="sqrt of the sum over the feature axis of (x_i - y_j)^2")
    return "(n, m) Euclidean distances by broadcasting (no loop), dtype kept, finite for identical points"


# -------------------------------------------------------------------------------------------- 01-logsumexp
def _lse_inputs(case: Case) -> list[tuple[torch.Tensor, int]]:
    """(x, dim) pairs with large and shifted values; the hidden ones add float64, other dims, many scales."""
    seed = case.seeded
    if not case.hidden:
        return [(_randn(4, 6, seed=seed(0)), 1), (_randn(4, 6, seed=seed(1)) * 1000, 1),
                (_randn(3, 5, seed=seed(2)) - 1000, -1), (_randn(5, 3, seed=seed(3), dtype=torch.float64) * 1e4, 0),
                (_randn(1, 1, seed=seed(4)), 1), (_randn(2, 5, 3, seed=seed(5)) * 500, 1)]
    inputs = [(_randn(2, 7, 3, seed=seed(10)) * 500, 1), (_randn(5, 4, seed=seed(11)) * 800, 0),
              (_randn(3, 9, seed=seed(12), dtype=torch.float64) * 1e4, -1), (_randn(1, 1, seed=seed(13)), 1)]
    for scale_seed in range(8):  # random scales from 1e-3 to 1e4: the result must track torch everywhere
        scale = 10.0 ** (-3 + scale_seed)
        inputs.append((_randn(6, 5, seed=seed(20 + scale_seed)) * scale + scale / 2, 1))
    return inputs


def _lse_gradient_input(case: Case) -> torch.Tensor:
    return _randn(3, 4, seed=case.seeded(31 if case.hidden else 30), dtype=torch.float64)


def _masked_rows() -> torch.Tensor:
    """Two rows of -inf, the first with one finite entry 3: a partly and a fully masked attention row."""
    masked = torch.full((2, 5), float("-inf"), dtype=torch.float64)
    masked[0, 1] = 3.0
    return masked


def _check_lse_shape(result: torch.Tensor, x: torch.Tensor, dim: int) -> None:
    expected = tuple(torch.logsumexp(x, dim).shape)
    if tuple(result.shape) != expected:
        fail("wrong-shape", observed=f"shape {tuple(result.shape)} for input {tuple(x.shape)}, dim={dim}",
             expected=f"{expected} (dim removed, as torch.logsumexp does)",
             cause="keepdim=True left in the result, or the reduction runs over another dimension",
             where="squeeze the max you subtracted before adding it back, and reduce over `dim`")


# What exercise 3 forbids: torch's own logsumexp and softmax, as functions or as tensor methods.
_LSE_FORBIDDEN = {
    "logsumexp": "the exercise asks you to build logsumexp yourself (max, exp, sum, log)",
    "special_logsumexp": "torch.special.logsumexp is torch.logsumexp under another name",
    "softmax": "the exercise forbids torch.softmax (its stability is the point of the exercise)",
    "special_softmax": "torch.special.softmax is torch.softmax under another name",
}


@register("01-logsumexp", nonfinite=('masked', 'results/*'), hints=Hints(
    nudge="log(sum(exp(x))) = m + log(sum(exp(x - m))) for any m; choose m = max so that the largest exp is "
          "exp(0) = 1.",
    concept="Subtract the max along dim before exp and add it back after the log; a slice that is entirely -inf "
            "has max -inf, and -inf - (-inf) = nan, so replace a non-finite max by 0.",
    solution="m = x.amax(dim=dim, keepdim=True); m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)); "
             "return m.squeeze(dim) + (x - m).exp().sum(dim=dim).log()",
    section="4. Numerical stability: logsumexp and softmax"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor", hint="Keep every step a tensor operation."),
        "wrong-shape": Requirement("the shape of torch.logsumexp(x, dim): dim removed",
                                   hint="Print the shape you return for a (4, 6) input and dim=1: is it (4,)?"),
        "overflow": Requirement("finite for inputs as large as 1e4 in magnitude",
                                hint="What is torch.exp(torch.tensor(1000.0))? Which value could you subtract "
                                     "first so that no exp exceeds 1?"),
        "wrong-values": Requirement("matches torch.logsumexp(x, dim)",
                                    hint="Compare your result with torch.logsumexp on a small input (in a test cell "
                                         "of your own): what did the subtraction take away?"),
        "no-gradient": Requirement("is differentiable by autograd",
                                   hint="Does your result have a grad_fn when x requires grad? Which step leaves "
                                        "torch?"),
        "wrong-gradient": Requirement("its gradient is softmax(x)",
                                      hint="Which part of your computation does autograd not see (a detach, an "
                                           "in-place edit)?"),
        "masked-row": Requirement("returns -inf for an all -inf slice",
                                  hint="Run it on torch.full((1, 3), float('-inf')): what is the max, and what is "
                                       "x - max?"),
        "forbidden-call": Requirement("does not call torch.logsumexp or torch.softmax (nor their tensor methods)",
                                      hint="The exercise asks you to build logsumexp from max, exp, sum and log: "
                                           "which of your calls does the whole job?"),
    })
def probe_logsumexp(logsumexp: Callable[[torch.Tensor, int], torch.Tensor], *, case: Case) -> dict:
    """Record the results on the case's inputs, the gradient through the result, the masked rows, and the
    torch calls the student's code made."""
    tracked_input = _lse_gradient_input(case).requires_grad_()
    with CallRecorder() as calls:
        results = [logsumexp(x, dim) for x, dim in _lse_inputs(case)]
        out = logsumexp(tracked_input, 1)
        masked = logsumexp(_masked_rows(), 1)
    tracked = isinstance(out, torch.Tensor) and out.requires_grad
    grad = torch.autograd.grad(out.sum(), tracked_input)[0] if tracked else None
    return {"results": results, "out": out, "grad": grad, "masked": masked, "calls": calls.seen}


@judges("01-logsumexp")
def judge_logsumexp(seen: dict, *, case: Case) -> str:
    """`logsumexp(x, dim)` matches torch.logsumexp without overflow, has gradient softmax(x), -inf on -inf rows,
    and calls neither torch.logsumexp nor torch.softmax."""
    forbid(seen["calls"], _LSE_FORBIDDEN, where="the text of exercise 3")
    for (x, dim), result in zip(_lse_inputs(case), seen["results"], strict=True):
        result = _require_tensor(result, "logsumexp", "the return statement of logsumexp")
        reference = torch.logsumexp(x, dim)
        _check_lse_shape(result, x, dim)
        if not torch.isfinite(result).all():
            fail("overflow", observed=f"non-finite results for inputs as large as {float(x.abs().max()):.3g}",
                 expected="finite values (torch.logsumexp gives them)",
                 cause="exp of a large number overflows to inf (exp(89) already overflows float32), or exp of a "
                       "very negative one underflows to 0 and log(0) = -inf",
                 where="subtract the max along `dim` before exp, and add it back after the log")
        tolerance = 1e-4 * (1 + reference.abs())
        if not ((result.double() - reference.double()).abs() <= tolerance.double()).all():
            fail("wrong-values", observed=f"largest error {_max_error(result, reference):.3g} against torch.logsumexp",
                 expected="relative errors below 1e-4",
                 cause="the max is not added back, or it is subtracted along another dimension, or another "
                       "formula",
                 where="log(sum(exp(x))) = m + log(sum(exp(x - m))): subtract and add the same m")
    out = _require_tensor(seen["out"], "logsumexp", "the return statement of logsumexp")
    if not out.requires_grad:
        fail("no-gradient", observed="the result does not require grad although the input does",
             expected="a result autograd can differentiate (its gradient is softmax(x))",
             cause="the graph is cut: torch.no_grad() or .detach() around the computation, or .item(), .numpy() "
                   "or torch.tensor(...) on an intermediate",
             where="stay in torch operations on tensors from start to end")
    x = _lse_gradient_input(case)
    if _max_error(_recorded_tensor(seen, "grad"), torch.softmax(x, 1)) > 1e-8:
        fail("wrong-gradient", observed="the gradient of sum(logsumexp(x, 1)) is not softmax(x, 1)",
             expected="d logsumexp / dx = softmax(x)", cause="a detach or an in-place edit inside the computation",
             where="the operations between x and the result")
    masked = _require_tensor(seen["masked"], "logsumexp", "the return statement of logsumexp")
    _check_lse_shape(masked, _masked_rows(), 1)
    if not (masked[0] == 3.0 and torch.isneginf(masked[1])):
        fail("masked-row", observed=f"a row [-inf, -inf, ...] gave {masked[1].item()} "
             f"(and [-inf, 3, -inf, ...] gave {masked[0].item()})",
             expected="-inf for an all -inf row (a fully masked attention row), 3 for the other",
             cause="the row max is -inf, and x - max = -inf - (-inf) = nan",
             where="replace a non-finite max by 0 before subtracting it (torch.where(torch.isfinite(m), m, 0))")
    return ("matches torch.logsumexp on inputs up to 1e4, in float64 and along other dims, softmax gradient, "
            "-inf rows, built without torch.logsumexp or softmax")


# ----------------------------------------------------------------------------------- 01-per-loss-gradients
def _loss_family(w: torch.Tensor, count: int, seed: int) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    targets = [_randn(*w.shape, seed=seed + i) for i in range(count)]
    scales = [0.5 + i for i in range(count)]

    def make(target: torch.Tensor, scale: float, kind: int) -> Callable[[torch.Tensor], torch.Tensor]:
        if kind % 2 == 0:
            return lambda v: scale * (v - target).pow(2).sum()
        return lambda v: scale * torch.sin(v * target).sum()

    return [make(t, s, i) for i, (t, s) in enumerate(zip(targets, scales, strict=True))]


def _gradient_problems(case: Case) -> list[tuple[torch.Tensor, list[Callable[[torch.Tensor], torch.Tensor]]]]:
    """(w, losses) pairs: a vector with three losses and a matrix with two; other shapes, a single loss and 3-d
    weights hidden."""
    settings = [((5,), 3, 0), ((4, 3), 2, 10)] if not case.hidden else [((4, 3), 4, 10), ((7,), 1, 20),
                                                                         ((2, 2, 2), 2, 30)]
    problems = []
    for shape, count, seed in settings:
        w = _randn(*shape, seed=case.seeded(seed + 99)).requires_grad_()
        problems.append((w, _loss_family(w, count, case.seeded(seed))))
    return problems


@register("01-per-loss-gradients", hints=Hints(
    nudge="backward() adds into w.grad; it never overwrites it. What must happen to w.grad between two losses?",
    concept="backward() accumulates into .grad (in place, into the same tensor); setting w.grad = None makes the "
            "next backward() create a new tensor. torch.autograd.grad returns gradients without touching .grad.",
    solution="return [torch.autograd.grad(loss(w), w)[0] for loss in losses]",
    section="5. Autograd: the graph and `.grad`"),
    requires={
        "wrong-count": Requirement("returns a list with one gradient per loss",
                                   hint="How many entries does your list have for three losses?"),
        "not-a-tensor": Requirement("each gradient is a tensor", hint="Append the gradient tensor itself."),
        "aliased": Requirement("each gradient is its own tensor",
                               hint="Print [g.data_ptr() for g in gradients]: are your entries one and the same "
                                    "tensor?"),
        "accumulated": Requirement("each gradient is that of its loss alone",
                                   hint="backward() adds into w.grad. What is in w.grad when the second loss's "
                                        "backward() starts?"),
        "wrong-values": Requirement("the gradient of loss(w) with respect to w",
                                    hint="Compare your first gradient with torch.autograd.grad(losses[0](w), w)[0]."),
        "graph-kept": Requirement("plain tensors, not connected to a graph",
                                  hint="Does a returned gradient have requires_grad=True? Which argument asked for "
                                       "a graph of the gradient?"),
        "grad-left-behind": Requirement("leaves w.grad as it found it (None)",
                                        hint="Print w.grad after your function returns: the caller's next "
                                             "backward() would add into it."),
    })
def probe_per_loss_gradients(per_loss_gradients: Callable[..., list[torch.Tensor]], *, case: Case) -> dict:
    """Record the returned gradients, how many distinct storages they use, whether w.grad was left set, and
    the torch calls the student's code made (to name an in-place reset, if there was one)."""
    runs = []
    with CallRecorder() as calls:
        for w, losses in _gradient_problems(case):
            result = per_loss_gradients(w, losses)
            tensors = isinstance(result, (list, tuple)) and all(isinstance(g, torch.Tensor) for g in result)
            runs.append({"result": result, "storages": len({g.data_ptr() for g in result}) if tensors else None,
                         "grad_left_behind": w.grad is not None})
    return {"runs": runs, "calls": calls.seen}


@judges("01-per-loss-gradients")
def judge_per_loss_gradients(seen: dict, *, case: Case) -> str:
    """`per_loss_gradients(w, losses)` returns each loss's own gradient, separate tensors, w.grad left None."""
    calls = seen["calls"]
    if not isinstance(calls, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in calls.items()):
        _malformed("the recorded calls")
    zeroed = calls.get("zero_")
    for (w, losses), run in zip(_gradient_problems(case), seen["runs"], strict=True):
        count = len(losses)
        expected = [torch.autograd.grad(loss(w), w)[0] for loss in losses]
        result = run["result"]
        if not isinstance(result, (list, tuple)) or len(result) != count:
            fail("wrong-count", observed=f"returned {type_name(result)}"
                 + (f" of length {len(result)}" if isinstance(result, (list, tuple)) else ""),
                 expected=f"a list of {count} gradients, one per loss",
                 cause="one gradient of the summed losses, a return inside the loop, or something else than the "
                       "list returned",
                 where="append one gradient per loss and return the list")
        for i, grad in enumerate(result):
            _require_tensor(grad, f"entry {i}", "what you append to the list")
        if count > 1 and run["storages"] == 1:
            fail("aliased", observed=f"all {count} returned gradients are the same tensor",
                 expected="one separate tensor per loss",
                 cause=f"you appended w.grad itself, then reset it in place ({zeroed}): every entry is that one "
                       "tensor and shows only its final state" if zeroed else
                 "you appended w.grad itself, and the next backward() added into that same tensor (backward() "
                 "accumulates in place while .grad is set): every entry is one tensor, holding the sum of the "
                 "gradients",
                 where="append a tensor of its own: set w.grad = None before each backward() (a new tensor is then "
                       "made), or use torch.autograd.grad")
        for i, (grad, reference) in enumerate(zip(result, expected, strict=True)):
            if _max_error(grad, reference) > 1e-5:
                accumulated = _max_error(grad, sum(expected[: i + 1])) <= 1e-5
                fail("accumulated" if accumulated else "wrong-values",
                     observed=f"gradient {i} differs from d loss_{i} / dw by {_max_error(grad, reference):.3g}"
                     + (f" and equals the sum of the gradients of losses 0..{i}" if accumulated else ""),
                     expected="each entry the gradient of its own loss only",
                     cause="backward() accumulates into w.grad, which was never reset between losses" if accumulated
                     else "the gradient is taken of another quantity than loss(w)",
                     where="reset w.grad (to None) before each backward()")
            if grad.requires_grad:
                fail("graph-kept", observed=f"gradient {i} requires grad", expected="plain gradient tensors",
                     cause="create_graph=True (it builds a graph of the gradient), or a gradient computed by hand "
                      "from w without detaching it",
                where="drop create_graph, or detach what you return")
        if run["grad_left_behind"] is not False:
            fail("grad-left-behind", observed="w.grad is not None after your function",
                 expected="w.grad left as it was (None): the caller's next backward() would add into it",
                 cause="the last loss's gradient stays in w.grad",
                 where="set w.grad = None at the end, or use torch.autograd.grad")
    return "one separate, non-accumulated gradient per loss, w.grad left clean"


# --------------------------------------------------------------------------------------------- 01-ema-update
def _ema_problems(case: Case) -> list[tuple[list[torch.Tensor], list[torch.Tensor], float]]:
    """(params, ema, decay) triples; params require grad, the EMA tensors do not (single values among them)."""
    settings = [([(4, 3), (3,), (1,)], 0.9, 0)] if not case.hidden else [([(2, 5), (5,), (1,)], 0.99, 10),
                                                                          ([(6,)], 0.75, 20)]
    problems = []
    for shapes, decay, seed in settings:
        params = [_randn(*s, seed=case.seeded(seed + i)).requires_grad_() for i, s in enumerate(shapes)]
        ema = [_randn(*s, seed=case.seeded(seed + 50 + i)) for i, s in enumerate(shapes)]
        problems.append((params, ema, decay))
    return problems


@register("01-ema-update", hints=Hints(
    nudge="The EMA tensors must change in place, without autograd recording the update.",
    concept="In-place methods (mul_, add_, lerp_, copy_) change a tensor that others hold references to; inside "
            "torch.no_grad() autograd records nothing, so the EMA tensors stay plain tensors.",
    solution="with torch.no_grad(): for e, p in zip(ema, params): e.mul_(decay).add_(p, alpha=1 - decay)",
    section="7. `detach`, `no_grad` and `inference_mode`"),
    requires={
        "not-in-place": Requirement("updates each EMA tensor in place: the list keeps the same tensor objects",
                                    hint="After your function, is ema[0] still the tensor it was before "
                                         "(compare id(ema[0]))?"),
        "builds-graph": Requirement("updates outside autograd",
                                    hint="Print ema[0].requires_grad after one update: what recorded the update?"),
        "params-changed": Requirement("leaves the parameters unchanged",
                                      hint="Which tensor is each in-place method of yours called on?"),
        "returns-value": Requirement("returns None", hint="What does your function return?"),
        "wrong-values": Requirement("ema = decay * ema + (1 - decay) * param",
                                    hint="Work one update by hand for decay 0.9, ema 0 and param 1: 0.1 expected."),
    })
def probe_ema_update(ema_update_: Callable[..., Any], *, case: Case) -> dict:
    """Two updates per problem; record after each the EMA list, the parameters, the return value and whether
    the list still holds the same tensors (stopping at the first update that replaced them or built a graph)."""
    runs: list[list[dict]] = []
    for params, ema, decay in _ema_problems(case):
        identities = [(id(e), e.data_ptr()) for e in ema]
        steps: list[dict] = []
        runs.append(steps)
        for _ in range(2):
            result = ema_update_(ema, params, decay)
            in_place = [(id(e), e.data_ptr()) for e in ema] == identities
            steps.append({"result": result, "in_place": in_place,
                          "ema": [e.clone() if isinstance(e, torch.Tensor) else e for e in ema],
                          "params": [p.detach().clone() for p in params]})
            if not in_place or any(e.requires_grad for e in ema):
                return {"runs": runs}
    return {"runs": runs}


@judges("01-ema-update")
def judge_ema_update(seen: dict, *, case: Case) -> str:
    """`ema_update_(ema, params, decay)` sets ema = decay * ema + (1 - decay) * param in place, outside autograd."""
    for (params, initial, decay), steps in zip(_ema_problems(case), seen["runs"], strict=True):
        before = initial
        for _, step in zip(range(2), steps, strict=True):
            ema = step["ema"]
            if step["in_place"] is not True:
                fail("not-in-place", observed="the list now holds new tensors",
                     expected="the same EMA tensors, updated in place (an optimizer or a checkpoint holds references "
                              "to them)",
                     cause="ema[i] = ... (or ema[:] = [...]) rebinds the list entry instead of changing the tensor",
                     where="use in-place methods (mul_, add_, lerp_, copy_) on each EMA tensor")
            if not (isinstance(ema, list) and all(isinstance(e, torch.Tensor) for e in ema)):
                _malformed("the EMA tensors")
            if any(e.requires_grad for e in ema):
                fail("builds-graph", observed="the EMA tensors require grad after the update (they have a grad_fn)",
                     expected="plain tensors, outside autograd",
                     cause="the in-place update mixed in parameters that require grad while autograd was recording",
                     where="wrap the update in torch.no_grad(), or use p.detach()")
            recorded = step["params"]
            if not (isinstance(recorded, list) and all(isinstance(p, torch.Tensor) for p in recorded)):
                _malformed("the parameters")
            if any(not torch.equal(p.detach(), r) for p, r in zip(params, recorded, strict=True)):
                fail("params-changed", observed="the model parameters changed", expected="only the EMA tensors change",
                     cause="an in-place method called on the parameter",
                     where="call in-place methods on the EMA tensors only")
            if step["result"] is not None:
                fail("returns-value", observed=f"ema_update_ returned {type_name(step['result'])}",
                     expected="None (a trailing underscore means in place)", cause="a return statement",
                     where="remove the return")
            expected = [decay * b + (1 - decay) * p.detach() for b, p in zip(before, params, strict=True)]
            errors = [_max_error(e, x) for e, x in zip(ema, expected, strict=True)]
            if max(errors) > 1e-6:
                unchanged = all(torch.equal(e, b) for e, b in zip(ema, before, strict=True))
                swapped = all(_max_error(e, (1 - decay) * b + decay * p.detach()) < 1e-6
                              for e, b, p in zip(ema, before, params, strict=True))
                fail("wrong-values",
                     observed="the EMA did not change" if unchanged else f"largest error {max(errors):.3g}"
                     + (" (decay and 1 - decay are swapped)" if swapped else ""),
                     expected=f"ema = {decay} * ema + {1 - decay:.2g} * param",
                     cause="a new tensor was bound to a local name (or a copy was updated), leaving the EMA "
                           "untouched" if unchanged
                     else "the weights of old and new values", where="the update formula")
            before = ema
    return "in-place EMA of the parameters, no autograd graph, parameters untouched"


# --------------------------------------------------------------------------------------------- 01-silu-function
def _silu_grad(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def _silu_inputs(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(x, grad_output) pairs in float32: moderate and large magnitudes, a single value (other shapes hidden)."""
    shapes = [((3, 4), 4), ((17,), 20), ((1,), 20)] if not case.hidden else [((2, 3, 5), 20), ((1,), 20), ((17,), 4)]
    return [(_randn(*shape, seed=case.seeded(index + (50 if case.hidden else 0))) * scale,
             _randn(*shape, seed=case.seeded(index + 200)))
            for index, (shape, scale) in enumerate(shapes)]


class _Context:
    """A stand-in for autograd's ctx, to call a Function's forward and backward directly (backward then runs
    where the call recorder sees it, which autograd's engine does not)."""

    needs_input_grad = (True,)

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors: torch.Tensor) -> None:
        """Accepted and ignored."""

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted and ignored."""


def _calls_of_function(silu_function: type, x: torch.Tensor, grad_output: torch.Tensor) -> dict[str, str]:
    """The torch calls of the student's forward and backward, called directly with a stand-in ctx. A Function
    that does not run that way (an unusual use of ctx) records what it called before it stopped: the record only
    serves to forbid calls, so it can only cost points."""
    ctx = _Context()
    with CallRecorder() as calls:
        try:
            with torch.no_grad():
                silu_function.forward(ctx, x)
                silu_function.backward(ctx, grad_output)
        except Exception:  # noqa: BLE001 (see the docstring: the real runs report the student's errors)
            pass
    return calls.seen


def _silu_float64_input(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, grad_output) in float64, for gradcheck and the precision of forward and backward."""
    shape = (4, 3) if not case.hidden else (2, 6)
    return (_randn(*shape, seed=case.seeded(77), dtype=torch.float64),
            _randn(*shape, seed=case.seeded(78), dtype=torch.float64))


@register("01-silu-function", hints=Hints(
    nudge="forward computes x * sigmoid(x) and saves what backward needs with ctx.save_for_backward; backward "
          "returns grad_output times the derivative.",
    concept="By the product rule, d/dx [x s(x)] = s(x) + x s(x) (1 - s(x)) = s(x) (1 + x (1 - s(x))); backward "
            "multiplies the incoming grad_output by it (the chain rule), in the input's dtype.",
    solution="(x,) = ctx.saved_tensors; s = torch.sigmoid(x); return grad_output * s * (1 + x * (1 - s))",
    section="8. A custom `autograd.Function`, proven with `gradcheck`"),
    requires={
        "not-a-function": Requirement("is a subclass of torch.autograd.Function",
                                      hint="What did you pass to check(): the class, an instance, or a function?"),
        "not-a-tensor": Requirement("forward returns a tensor", hint="What does your forward return?"),
        "input-modified": Requirement("forward leaves its input untouched",
                                      hint="Which of your operations in forward end in an underscore?"),
        "wrong-forward": Requirement("forward computes x * sigmoid(x)",
                                     hint="Evaluate your forward at x = 1: x * sigmoid(x) is 0.731."),
        "wrong-backward": Requirement("backward computes the derivative of x * sigmoid(x)",
                                      hint="x * sigmoid(x) is a product of two functions of x: which rule "
                                           "differentiates a product?"),
        "ignores-grad-output": Requirement("backward multiplies by grad_output (the chain rule)",
                                           hint="What does backward receive, and what must it do with it?"),
        "gradcheck-failed": Requirement("passes gradcheck in float64",
                                        hint="Run your Function on a float64 input: what dtype comes out of forward "
                                             "and backward?"),
        "forbidden-call": Requirement("does not call torch.nn.functional.silu",
                                      hint="The exercise asks you to write SiLU and its derivative yourself: which "
                                           "of your calls computes it for you?"),
    })
def probe_silu_function(silu_function: type, *, case: Case) -> dict:
    """Record forward outputs, the input as left and the gradients for each input, then gradcheck in float64
    and the float64 forward and backward (stopping where the output is unusable or the input changed)."""
    if not (isinstance(silu_function, type) and issubclass(silu_function, torch.autograd.Function)):
        return {"is_function": False, "what": repr(silu_function)[:200]}
    runs: list[dict] = []
    observation: dict[str, Any] = {"is_function": True, "runs": runs}
    for x, grad_output in _silu_inputs(case):
        before = x.clone()
        x.requires_grad_()
        y = silu_function.apply(x)
        runs.append({"y": y, "x_after": x.detach().clone()})
        if not isinstance(y, torch.Tensor) or y.shape != x.shape or not torch.equal(x.detach(), before):
            return observation
        runs[-1]["grad"] = torch.autograd.grad(y, x, grad_output)[0]
    x64, grad_output64 = _silu_float64_input(case)
    observation["calls"] = _calls_of_function(silu_function, x64.clone(), grad_output64)
    x64.requires_grad_()
    observation["gradcheck"] = torch.autograd.gradcheck(silu_function.apply, (x64,), eps=1e-6, atol=1e-5,
                                                        raise_exception=False)
    y64 = silu_function.apply(x64)
    observation["y64"] = y64
    observation["grad64"] = torch.autograd.grad(y64, x64, grad_output64)[0]
    return observation


@judges("01-silu-function")
def judge_silu_function(seen: dict, *, case: Case) -> str:
    """`SiLUFunction.apply(x)` is x * sigmoid(x) with backward grad_output * s(x)(1 + x(1 - s(x))), float64-exact."""
    if seen["is_function"] is not True:
        fail("not-a-function", observed=f"got {seen.get('what')}", expected="a subclass of torch.autograd.Function",
             cause="passing an instance or a plain function",
             where="class SiLUFunction(torch.autograd.Function) and pass the class")
    for (x, grad_output), run in zip(_silu_inputs(case), seen["runs"], strict=True):
        y = _require_tensor(run["y"], "SiLUFunction.apply", "the return statement of forward")
        if not torch.equal(_recorded_tensor(run, "x_after"), x):
            fail("input-modified", observed="the input changed", expected="forward leaves x untouched",
                 cause="an in-place operation such as x.sigmoid_() or x.mul_() in forward",
                 where="use out-of-place operations in forward")
        if _max_error(y, F.silu(x)) > 1e-5:
            fail("wrong-forward", observed=f"forward differs from x * sigmoid(x) by {_max_error(y, F.silu(x)):.3g}",
                 expected="SiLU(x) = x * sigmoid(x)", cause="another formula in forward", where="forward")
        grad = _recorded_tensor(run, "grad")
        expected = grad_output * _silu_grad(x)
        if _max_error(grad, expected) > 1e-4:
            ignores = _max_error(grad, _silu_grad(x)) <= 1e-4
            fail("ignores-grad-output" if ignores else "wrong-backward",
                 observed=f"the gradient differs from the true one by {_max_error(grad, expected):.3g}"
                 + (" and equals the local derivative alone" if ignores else ""),
                 expected="grad_output * s(x) * (1 + x * (1 - s(x)))",
                 cause="backward must multiply the incoming gradient (chain rule)" if ignores else
                 "the derivative of x * sigmoid(x) is not s(x) alone: the product rule adds x * s(x) * (1 - s(x))",
                 where="the return statement of backward")
    x64, grad_output64 = _silu_float64_input(case)
    forbid(seen["calls"], {"silu": "the exercise asks you to write SiLU's forward and backward yourself"},
           where="the text of exercise 6")
    error64 = max(_max_error(_recorded_tensor(seen, "y64"), F.silu(x64)),
                  _max_error(_recorded_tensor(seen, "grad64"), grad_output64 * _silu_grad(x64)))
    gradcheck_passed = seen["gradcheck"] is True
    if not gradcheck_passed or error64 > 1e-10:
        fail("gradcheck-failed",
             observed="torch.autograd.gradcheck(SiLUFunction.apply, float64 input) fails" if not gradcheck_passed
             else f"on a float64 input, forward and backward differ from the exact values by {error64:.3g}",
             expected="the analytic backward agrees with finite differences in float64",
             cause="a float32 conversion (.float(), torch.float32 constants) inside forward or backward loses "
                   "precision",
             where="keep the input's dtype throughout forward and backward")
    return "forward equals x*sigmoid(x), backward equals the analytic gradient, gradcheck passes in float64"
