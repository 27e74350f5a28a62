"""16-predict, the judge.

Eval mode, inference_mode, batches of batch_size in order, the logits as one tensor, the mode restored.
"""

from __future__ import annotations

import torch

from harness.checks.lesson16.common import case_inputs, case_model
from harness.checks.lesson16.predict import predict_calls
from harness.contract.case import Case
from harness.contract.compare import close_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson16.common import _reference, fail_if_raised


def _expected_batches(count: int, batch_size: int) -> list[int]:
    return [min(batch_size, count - start) for start in range(0, count, batch_size)]


@judges(
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
            "leaves the model in the mode it came in: training stays training, eval stays eval",
            hint="Read model.training before switching to eval, and set it back at the end (model.train(flag)): "
            "what does your function do to a model that arrives in eval mode?"),
    },
)
def judge_predict(seen: dict, *, case: Case) -> str:
    """Eval mode, inference_mode, batches of batch_size in order, the logits as one tensor, the mode restored."""
    calls, results = predict_calls(case), seen.get("results")
    if not isinstance(results, list) or len(results) != len(calls):
        raise WireError("malformed observation: not one result per call")
    for index, ((count, batch_size, training), result) in enumerate(zip(calls, results, strict=True)):
        arrived = "training" if training else "eval"
        what = f"predict on {count} requests with batch_size={batch_size} (model in {arrived} mode)"
        forwards = result.get("forwards")
        if not isinstance(forwards, list) or not all(isinstance(f, dict) for f in forwards):
            raise WireError("malformed observation: forwards is not a list of records")
        if not forwards:
            fail_if_raised(result, what)  # before any forward: nothing else to judge
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
        fail_if_raised(result, what)
        got = result.get("returned")
        if not isinstance(got, torch.Tensor):
            fail("not-a-tensor", observed=f"predict returned {type_name(got)}",
                 expected=f"one tensor of shape ({count}, classes)",
                 cause="the batch outputs were returned as a list: join them with torch.cat" if isinstance(got, list)
                 else "something other than the outputs is returned", where="the return statement of predict")
        want = _reference(case_model(case, salt=20), case_inputs(case, count, salt=index))
        if not close_values(got, want, rtol=1e-4, atol=1e-5):
            softmaxed = close_values(got, want.softmax(-1), rtol=1e-4, atol=1e-5)
            fail("wrong-output", observed=f"the outputs differ from the model's logits in {what}"
                 + (f" (shape {tuple(got.shape)}, {got.dtype})" if got.shape != want.shape or got.dtype != want.dtype
                    else ""),
                 expected=f"the logits, shape {tuple(want.shape)}, row i for request i",
                 cause="a softmax was applied to the logits" if softmaxed else
                 "something was applied on top of the logits (argmax, softmax, a rounding), or rows were reordered",
                 where="what predict collects from each batch")
        after = result.get("training_after")
        if not isinstance(after, bool):
            raise WireError("malformed observation: training_after is not a flag")
        if after is not training:
            fail("flag-not-restored",
                 observed=f"the model was left in {'training' if after else 'eval'} mode by {what}",
                 expected=f"the mode it came in ({arrived}): "
                 + ("the caller may go on training" if training else "a served model must stay in eval mode"),
                 cause="model.eval() without setting the mode back" if training else
                 "model.train() at the end, whatever the mode it came in: read model.training first and restore "
                 "it with model.train(was_training)", where="the end of predict")
    return "eval mode under inference_mode, batches of batch_size in order, the logits as one tensor, mode restored"
