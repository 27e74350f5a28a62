"""16-top-k, the judge.

Eval mode under inference_mode; int64 class ids and float32 probabilities of shape (rows, k); the
probabilities are the softmax over each row's classes, at the k most probable classes, most probable first.
"""

from __future__ import annotations

import torch

from harness.checks.lesson16.common import case_inputs, case_model
from harness.checks.lesson16.top_k import top_k_calls
from harness.contract.case import Case
from harness.contract.compare import close_values, is_tensor_like, same_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson16.common import _reference, fail_if_raised


@judges(
    "16-top-k",
    hints=Hints(
        nudge="Eval mode, one forward under torch.inference_mode(), softmax over the classes (the last dim), then "
        "torch.topk on the probabilities.",
        concept="A client wants each row's most likely classes and how likely they are: a softmax over each row's "
        "classes turns logits into probabilities, topk returns them sorted, with their class ids as int64.",
        solution="model.eval()\nwith torch.inference_mode():\n    probabilities = model(inputs).softmax(dim=-1)\n"
        "values, classes = probabilities.topk(k, dim=-1)\nreturn classes, values",
        section="5. Answers a client can use",
    ),
    requires={
        "train-mode": Requirement(
            "runs the model in eval mode",
            hint="Print model.training inside your function, just before the forward."),
        "no-inference-mode": Requirement(
            "runs the forward under torch.inference_mode()",
            hint="Which context manager skips the graph and the version counters, and is it the one you use?"),
        "wrong-dtype": Requirement(
            "returns classes as int64 and probabilities as float32, each of shape (rows, k)",
            hint="Print the dtype and shape of both tensors you return: what did a conversion change?"),
        "not-probabilities": Requirement(
            "probabilities are the softmax over each row's classes",
            hint="Over which dimension does your softmax sum to 1: the classes of a row, or the rows of the batch?"),
        "wrong-classes": Requirement(
            "classes are each row's k most probable class ids, most probable first",
            hint="Print probabilities for a row next to your classes: are they the largest, in decreasing order?"),
    },
)
def judge_top_k(seen: dict, *, case: Case) -> str:
    """Eval mode under inference_mode, the dtypes and shapes, then the probabilities, then the classes."""
    calls, results = top_k_calls(case), seen.get("results")
    if not isinstance(results, list) or len(results) != len(calls) or not all(isinstance(r, dict) for r in results):
        raise WireError("malformed observation: not one result per call")
    for index, ((rows, k), result) in enumerate(zip(calls, results, strict=True)):
        what, forwards = f"top_k on {rows} rows with k={k}", result.get("forwards")
        if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
            raise WireError("malformed observation: no forward recorded")
        if not forwards:
            fail_if_raised(result, what)
            raise WireError("malformed observation: no forward recorded")
        if any(f.get("training") is not False for f in forwards):
            fail("train-mode", observed=f"the model ran in training mode in {what}",
                 expected="eval mode: Dropout off and BatchNorm's running statistics",
                 cause="model.eval() is missing (the model arrives in training mode)", where="before the forward")
        if any(f.get("inference_mode") is not True for f in forwards):
            fail("no-inference-mode", observed=f"a forward ran outside torch.inference_mode() in {what}",
                 expected="the forward under torch.inference_mode()",
                 cause="torch.no_grad() (the older habit) or no context at all", where="the block around the forward")
        fail_if_raised(result, what)
        logits = _reference(case_model(case, salt=60), case_inputs(case, rows, salt=60 + index))
        probabilities = logits.softmax(-1)
        want_p, want_c = probabilities.topk(k, dim=-1)
        got = result.get("returned")
        got_c, got_p = got if isinstance(got, tuple) and len(got) == 2 else (got, None)
        if not (is_tensor_like(got_c, want_c) and is_tensor_like(got_p, want_p)):
            shown = ", ".join(f"{type_name(t)} {tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor)
                              else type_name(t) for t in (got if isinstance(got, tuple) else (got,)))
            fail("wrong-dtype", observed=f"{what} returned {shown}",
                 expected=f"(classes, probabilities): int64 and float32 tensors of shape {tuple(want_c.shape)}",
                 cause="a conversion (.int(), .half(), .tolist()), the pair in the other order, or k ignored",
                 where="the return statement of top_k")
        in_range = bool(((got_c >= 0) & (got_c < probabilities.shape[-1])).all())
        if not (in_range and close_values(got_p, probabilities.gather(-1, got_c), rtol=1e-4, atol=1e-6)):
            fail("not-probabilities", observed=f"in {what}, the probabilities are not the softmax of each row's "
                 "logits at the classes returned", expected="softmax over the classes (dim=-1): each row sums to 1",
                 cause=_probability_cause(logits, got_c, got_p) if in_range else "class ids outside the classes",
                 where="the softmax in top_k")
        if not same_values(got_c, want_c):
            fail("wrong-classes", observed=f"in {what}, classes {got_c[0].tolist()} for the first row",
                 expected=f"the {k} most probable, most probable first: {want_c[0].tolist()}",
                 cause="an ascending sort (the least probable first), or topk over the wrong dimension",
                 where="the topk (or sort) in top_k")
    return "eval mode under inference_mode; int64 classes, float32 softmax probabilities, the top k in order"


def _probability_cause(logits: torch.Tensor, classes: torch.Tensor, got: torch.Tensor) -> str:
    """What the returned probabilities are, among the usual slips, at the classes returned; the candidates when
    they are none of them."""
    k = classes.shape[-1]
    candidates = {
        f"a softmax over the {k} kept logits only (topk first, then softmax): the probabilities are renormalised to "
        f"sum to 1 over the top {k}, not over all {logits.shape[-1]} classes; softmax over every class first, then "
        "topk": logits.gather(-1, classes).softmax(-1),
        "a softmax over the batch (dim=0): each class's column sums to 1, not each row": logits.softmax(0).gather(
            -1, classes),
        "the logits themselves, without a softmax": logits.gather(-1, classes),
        "log-probabilities (log_softmax), not probabilities": logits.log_softmax(-1).gather(-1, classes),
    }
    for cause, value in candidates.items():
        if close_values(got, value, rtol=1e-4, atol=1e-6):
            return cause
    return ("none of a softmax over the batch (dim=0), over the kept top k only, the logits or log-probabilities: "
            "print a row of what you return next to model(inputs).softmax(-1) of that row")
