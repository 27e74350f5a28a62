"""The judge side of the memory drills (`harness.drills.bank.memory`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract import expect
from harness.contract.case import Case
from harness.contract.compare import close_tensors, close_values, malformed
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.memory import (
    ACC_LR,
    ACC_STARTER,
    UNEVEN_STARTER,
    acc_inputs,
    activation_checkpoint_inputs,
    activation_models,
    adam_models,
    uneven_inputs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited, with_fixes
from harness.judges.drills.whys import add_answers
from harness.memory import saved_for_backward

# ------------------------------------------------------------------------------------------------ shared helpers
_TOLERANCE = {"atol": 1e-6, "rtol": 1e-4, "dtype": False}  # for every list of tensors compared here


def _judge_adam_state(seen: dict, *, case: Case) -> str:
    got_all = seen.get("bytes")
    models = adam_models(case)
    if not isinstance(got_all, list) or len(got_all) != len(models):
        malformed("the observation is not one the probe writes")
    for model, got in zip(models, got_all, strict=True):
        unique = list(model.parameters())
        trainable = [p for p in unique if p.requires_grad]
        want = sum(2 * p.numel() * p.element_size() for p in trainable)
        if not isinstance(got, int) or isinstance(got, bool):
            fail("not-an-int", observed=f"returned {describe(got)}", expected=f"an int: {want}",
                 cause="a float or tensor sum", where="the return statement")
        if got == want:
            continue
        every = [p for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
        causes = {
            sum(2 * p.numel() * p.element_size() for p in unique): "frozen parameters counted: a parameter with "
            "requires_grad=False gets no gradient, and AdamW creates no state for it",
            sum(2 * p.numel() * p.element_size() for p in every): "the tied weight counted twice: it is one tensor "
            "(model.parameters() lists it once), so AdamW keeps one state for it",
            sum(8 * p.numel() for p in trainable): "every parameter taken as 4 bytes: the state has the parameter's "
            "dtype (2 bytes for bfloat16); use p.element_size()",
            want // 2: "one buffer counted: AdamW keeps two per parameter, exp_avg and exp_avg_sq",
        }
        fail("wrong-bytes", observed=f"{got} bytes for {type(model).__name__} with "
             f"{sum(p.numel() for p in unique)} parameters", expected=f"{want} bytes",
             cause=causes.get(got, "the count differs: two buffers per trainable parameter, in its own dtype, each "
                              "tensor once"), where="which parameters you count, and the bytes of each element")
    return "AdamW's state counted before it exists: trainable parameters only, each once, in their own dtype"


_ADAM_SOLUTION = '''import torch


def adam_state_bytes(model):
    # model.parameters() lists a tied weight once; a frozen parameter never gets a gradient, so no state
    return sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
'''


def _judge_activation_bytes(seen: dict, *, case: Case) -> str:
    got_all = seen.get("bytes")
    models = activation_models(case)
    if not isinstance(got_all, list) or len(got_all) != len(models):
        malformed("the observation is not one the probe writes")
    for (model, x), got in zip(models, got_all, strict=True):
        with saved_for_backward(exclude=model.parameters()) as saved:
            model(x).sum()
        with saved_for_backward() as everything:
            model(x).sum()
        if not isinstance(got, int) or isinstance(got, bool):
            fail("not-an-int", observed=f"returned {describe(got)}", expected="an int number of bytes",
                 cause="a tensor or float sum", where="the return statement")
        if got != saved.bytes:
            cause = ("the weights that linear layers save were counted: leave out tensors that share a storage with "
                     "a parameter" if got == everything.bytes else
                     "a storage saved by two operations (an activation saved by one layer and by the next) was "
                     "counted twice: key by tensor.untyped_storage().data_ptr()" if got > saved.bytes else
                     "a saved view counted by its own size: a slice keeps its whole storage alive, so count "
                     "tensor.untyped_storage().nbytes() (or saved tensors were missed)")
            fail("wrong-bytes", observed=f"{got} bytes for a {len(model)}-layer Sequential on a batch of {len(x)}",
                 expected=f"{saved.bytes} bytes of activations (parameters excluded, each storage once)",
                 cause=cause, where="the pack hook")
    return "activation bytes saved for backward, each storage once, parameters left out"


_BYTES_SOLUTION = '''import torch


def activation_bytes(model, x):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return sum(storages.values())
'''


def _judge_checkpointed(seen: dict, *, case: Case) -> str:
    blocks, x = activation_checkpoint_inputs(case)
    h = x
    for block in blocks:
        h = block(h)
    h.sum().backward()
    expect.close("checkpointed_forward(blocks, x)", seen.get("out"), h.detach(), atol=1e-6, rtol=1e-5,
                 where="the loop over blocks", cause="a block skipped or applied twice")
    if seen.get("requires_grad") is not True:
        fail("no-grads", observed="the output does not require grad", expected="gradients for every parameter",
             cause="the reentrant checkpoint (use_reentrant=True) with an input that does not require grad: it "
             "returns an output cut off from the parameters", where="the checkpoint call's arguments")
    grads = seen.get("grads")
    want = [p.grad for p in blocks.parameters()]
    if not isinstance(grads, list) or len(grads) != len(want) or not close_tensors(grads, want, **_TOLERANCE):
        fail("wrong-grads", observed="the gradients differ from the plain forward's", expected="the same gradients",
             cause="a block skipped, applied twice, or detached", where="the loop over blocks")
    limit = len(blocks) * x.numel() * x.element_size()
    saved = seen.get("saved_bytes")
    if not isinstance(saved, int) or saved > limit:
        fail("not-checkpointed", observed=f"{saved} bytes kept for backward",
             expected=f"at most {limit}: each block's input, nothing inside the blocks",
             cause="a block runs outside checkpoint, so its inner activations are kept", where="the loop over blocks")
    return "non-reentrant checkpointing: gradients reach the parameters, only block inputs kept"


def _chunk_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[torch.Tensor]:
    """The gradient of each micro-batch's own mean loss, flattened."""
    grads = []
    for xb, yb in zip(x.split(micro), y.split(micro), strict=True):
        model.zero_grad(set_to_none=True)
        F.mse_loss(model(xb), yb).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return grads


def _judge_uneven(seen: dict, *, case: Case) -> str:
    model, x, y, micro = uneven_inputs(case)
    got = seen.get("gradient")
    sizes = [len(chunk) for chunk in x.split(micro)]
    chunks = _chunk_gradients(model, x, y, micro)
    # the weightings a plausible answer gives each micro-batch's mean gradient, each with what it means
    mistakes = (
        ("losses-summed", [1.0] * len(sizes), "each micro-batch's mean loss was backpropagated whole: the gradients "
         f"add up to {len(sizes)} means, {len(sizes)} times the gradient of the batch's mean loss"),
        ("equal-weights", [1 / len(sizes)] * len(sizes), f"every micro-batch weighs 1/{len(sizes)}: the last one "
         f"holds {sizes[-1]} of {len(x)} rows, so its share of the mean is {sizes[-1]}/{len(x)}"),
        ("divided-by-micro-batch-size", [n / micro for n in sizes], "each micro-batch's summed loss was divided by "
         f"micro_batch_size ({micro}): the last one holds {sizes[-1]} rows, and the whole sum must be divided by "
         f"len(x) ({len(x)})"),
    )
    for code, weights, cause in mistakes:
        if close_values(got, sum(w * g for w, g in zip(weights, chunks, strict=True)), rtol=1e-5, atol=1e-6):
            fail(code, observed=f"the accumulated gradient equals the micro-batches' mean gradients weighted "
                 f"{[round(w, 4) for w in weights]}", expected=f"weights {[f'{n}/{len(x)}' for n in sizes]} (each "
                 "micro-batch's share of the rows)", cause=cause, where="the factor on each micro-batch's loss")
    want = sum(n / len(x) * g for n, g in zip(sizes, chunks, strict=True))
    expect.close("the accumulated gradient", got, want, atol=1e-6, rtol=1e-5,
                 where="the factor on each micro-batch's loss",
                 cause=f"the micro-batches are not weighed by their share of the rows: {len(x)} rows in "
                 f"micro-batches of {sizes}")
    return "the full batch's gradient from uneven micro-batches"


def _judge_accumulation_bugs(seen: dict, *, case: Case) -> str:
    model, micro, accum = acc_inputs(case)
    params = list(model.parameters())
    records = seen.get("steps")
    groups = [micro[i:i + accum] for i in range(0, len(micro), accum)]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        malformed("step records")
    if len(records) != len(groups):
        fail("wrong-step-count", observed=f"{len(records)} optimizer steps for {len(micro)} micro-batches",
             expected=f"{len(groups)}: one step per {accum} micro-batches", cause="a step at every micro-batch, or "
             "none at the end of a group", where="the step condition")
    losses = []
    for step, (record, group) in enumerate(zip(records, groups, strict=True)):
        got_params, got_grads = record.get("params"), record.get("grads")
        if not isinstance(got_params, list) or not isinstance(got_grads, list):
            malformed("step record")
        if len(got_params) != len(params) or not close_tensors(got_params, [p.detach() for p in params], **_TOLERANCE):
            fail("wrong-updates", observed=f"before step {step} the weights differ from the reference's",
                 expected=f"w <- w - {ACC_LR} * the group's mean gradient", cause="an extra update, or a wrong "
                 "gradient at an earlier step", where="the training loop")
        per_micro = []
        for x, y in group:
            model.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            losses.append(float(loss.detach()))
            per_micro.append([p.grad.detach().clone() for p in params])
        want = [sum(g[i] for g in per_micro) / accum for i in range(len(params))]
        if len(got_grads) != len(params) or any(g is None for g in got_grads):
            fail("no-gradient", observed=f"step {step} ran with parameters that have no gradient",
                 expected="the group's accumulated gradient", cause="the gradients were cleared before step()",
                 where="where zero_grad sits relative to step()")
        if close_tensors(got_grads, want, **_TOLERANCE):
            pass
        elif close_tensors(got_grads, [g * accum for g in want], **_TOLERANCE):
            fail("unscaled-accumulation", observed=f"at step {step} the gradient is {accum} times the mean over "
                 f"the group's {accum} micro-batches", expected="the gradient of the mean loss over the group, as one "
                 f"batch {accum} times larger would give", cause="each micro-batch's loss is backpropagated whole: "
                 "the gradients add up to a sum, so the effective learning rate grows with accum_steps",
                 where="the loss each micro-batch backpropagates")
        elif (close_tensors(got_grads, [g / accum for g in per_micro[-1]], **_TOLERANCE)
              or close_tensors(got_grads, per_micro[-1], **_TOLERANCE)):
            fail("lost-micro-batches", observed=f"at step {step} the gradient holds only the group's last "
                 "micro-batch", expected=f"the {accum} micro-batches' gradients added up", cause="zero_grad() at "
                 "every micro-batch wipes what the earlier ones accumulated", where="where zero_grad sits in the loop")
        else:
            fail("wrong-gradient", observed=f"the gradient at step {step} is not the group's mean gradient",
                 expected=f"the mean over the group's {accum} micro-batches", cause="the loss or its scaling differs",
                 where="the training loop")
        with torch.no_grad():
            for p, g in zip(params, want, strict=True):
                p -= ACC_LR * g
    final = seen.get("final")
    if not isinstance(final, list) or len(final) != len(params) or not close_tensors(
            final, [p.detach() for p in params], **_TOLERANCE):
        fail("wrong-updates", observed="the weights after training differ from the reference's",
             expected="the last group's step applied", cause="the last step is missing or altered", where="the loop")
    mean_loss = seen.get("mean_loss")
    if isinstance(mean_loss, torch.Tensor) and mean_loss.requires_grad:
        fail("graph-kept", observed="train_accumulated returned a tensor that requires grad",
             expected="a Python float", cause="`total += loss` adds the live loss: the result holds the autograd "
             "graph of every micro-batch, and a caller that keeps a history of these values keeps them all",
             where="the running total and the return line")
    want_mean = sum(losses) / len(losses)
    if not isinstance(mean_loss, (int, float)) or isinstance(mean_loss, bool) or not abs(mean_loss - want_mean) <= 1e-5:
        fail("wrong-value", observed=f"returned {describe(mean_loss)}",
             expected=f"{want_mean:.6f}: the mean of the micro-batches' losses, as a float",
             cause="the scaled losses averaged, or not a float", where="what you add to the running total")
    return f"{len(groups)} steps, each on the mean gradient of {accum} micro-batches; the mean loss as a float"


_ACC_SOLUTION = '''import torch
import torch.nn.functional as F


def train_accumulated(model, optimizer, micro_batches, accum_steps):
    model.train()
    total = torch.zeros(())
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(micro_batches):
        loss = F.mse_loss(model(x), y)
        (loss / accum_steps).backward()  # the group's gradients add up to its mean
        total += loss.detach()  # no graph kept
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)  # only after the step
    return (total / len(micro_batches)).item()
'''

_ACC_FIXES = {
    "zero_grad": ("        optimizer.zero_grad()\n", "",
                  "            optimizer.step()\n", "            optimizer.step()\n"
                  "            optimizer.zero_grad(set_to_none=True)\n",
                  "    total = 0.0\n", "    total = 0.0\n    optimizer.zero_grad(set_to_none=True)\n"),
    "scale": ("        loss.backward()\n", "        (loss / accum_steps).backward()\n"),
    "graph": ("        total += loss\n", "        total += loss.detach()\n",
              "    return total / len(micro_batches)\n", "    return (total / len(micro_batches)).item()\n"),
}


def _acc_fixed(*names: str) -> str:
    return with_fixes(ACC_STARTER, *(_ACC_FIXES[name] for name in names))


add_answers(
    choice_answers(
        "memory-adam-bytes",
        options=(
            ("4 GB: the parameters are all there is", "the gradients and AdamW's two moments are each as large as "
             "the parameters, and they stay for the whole run"),
            ("8 GB: the parameters and their gradients", "AdamW also keeps two running averages per parameter "
             "(exp_avg and exp_avg_sq): 8 more bytes each"),
            ("16 GB: weights, gradients, two moments", "4 bytes of weight + 4 of gradient + 8 of AdamW moments "
             "(exp_avg, exp_avg_sq) = 16 bytes per parameter"),
            ("12 GB: weights, grads, one momentum", "one momentum buffer is SGD with momentum; Adam keeps a second "
             "average, of the squared gradient"),
        ),
        key="c",
    )
)


add_answers(
    Answers(
        drill_id="memory-adam-state-bytes",
        solution=_ADAM_SOLUTION,
        wrong_answers=(
            (edited(_ADAM_SOLUTION, (" if p.requires_grad)", ")")), "wrong-bytes"),
            (edited(_ADAM_SOLUTION, ("p.element_size()", "4")), "wrong-bytes"),
            (edited(_ADAM_SOLUTION,
                    ("for p in model.parameters()",
                     "for _, p in model.named_parameters(remove_duplicate=False)")), "wrong-bytes"),
            (edited(_ADAM_SOLUTION, ("return sum(2 *", "return sum(1 *")), "wrong-bytes"),
            ('''from harness.memory import optimizer_state_bytes
import torch


def adam_state_bytes(model):
    optimizer = torch.optim.AdamW(model.parameters())
    return optimizer_state_bytes(optimizer)
''', "harness-import"),
        ),
        judge=_judge_adam_state,
    )
)


add_answers(
    Answers(
        drill_id="memory-activation-bytes",
        solution=_BYTES_SOLUTION,
        wrong_answers=(
            (edited(_BYTES_SOLUTION,
                    ("        if storage.data_ptr() not in params:\n            storages",
                     "        storages")), "wrong-bytes"),
            (edited(_BYTES_SOLUTION,
                    ("storages[storage.data_ptr()] = storage.nbytes()",
                     "storages[len(storages)] = tensor.nbytes")), "wrong-bytes"),
            (edited(_BYTES_SOLUTION,
                    ("storages[storage.data_ptr()] = storage.nbytes()",
                     "storages[tensor.data_ptr()] = tensor.nbytes")), "wrong-bytes"),
            (edited(_BYTES_SOLUTION,
                    ("return sum(storages.values())", "return sum(storages.values()) / 1.0")),
             "not-an-int"),
            ('''from harness.memory import saved_for_backward


def activation_bytes(model, x):
    with saved_for_backward(exclude=model.parameters()) as saved:
        model(x)
    return saved.bytes
''', "harness-import"),
        ),
        judge=_judge_activation_bytes,
    )
)


add_answers(
    Answers(
        drill_id="memory-uneven-accumulation",
        solution=edited(UNEVEN_STARTER, ("/ len(chunks)", "* (len(xb) / len(x))")),
        wrong_answers=(
            (edited(UNEVEN_STARTER, ("/ len(chunks)", "")), "losses-summed"),
            (edited(UNEVEN_STARTER,
                    ("(nn.functional.mse_loss(model(xb), yb) / len(chunks))",
                     "(nn.functional.mse_loss(model(xb), yb, reduction='sum') / micro_batch_size)")),
             "divided-by-micro-batch-size"),
        ),
        judge=_judge_uneven,
    )
)


add_answers(
    choice_answers(
        "memory-activations-vs-batch",
        options=(
            ("about 20 GB: everything doubles", "the parameters, gradients and optimizer state do not depend on the "
             "batch: only what the forward saves per example does"),
            ("about 10 GB: the batch is not stored", "autograd keeps each layer's inputs and intermediate results for "
             "backward, one set per example: they grow with the batch"),
            ("about 12 GB: only the gradients grow", "a gradient has the shape of its parameter, whatever the batch "
             "size: it does not grow at all"),
            ("about 16 GB: only activations double", "the 4 GB of parameters, gradients and AdamW state stay; the "
             "6 GB of activations saved for backward grow linearly with the batch to 12 GB"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "memory-checkpoint-tradeoff",
        options=(
            ("compute: block forwards rerun in backward", "only each block's input is kept; during backward every "
             "block's forward runs again to rebuild its activations: about one extra forward pass"),
            ("accuracy: the gradients become approximate", "the recomputed activations are the same values (the RNG "
             "state is replayed for dropout): the gradients are exact"),
            ("parameter memory: the weights are copied per block", "checkpointing touches only activations; the "
             "weights, their gradients and the optimizer state are unchanged"),
            ("nothing: the activations are moved to CPU memory", "that is offloading, another technique; checkpointing "
             "drops the activations and recomputes them"),
        ),
        key="a",
    )
)


add_answers(
    Answers(
        drill_id="memory-accumulation-script",
        solution=_ACC_SOLUTION,
        wrong_answers=(
            (_acc_fixed("scale", "graph"), "lost-micro-batches"),
            (_acc_fixed("zero_grad", "graph"), "unscaled-accumulation"),
            (_acc_fixed("zero_grad", "scale"), "graph-kept"),
            # the scaled loss added to the total: training is right, the reported loss is accum_steps times too small
            (edited(_acc_fixed("zero_grad", "graph"),
                    ("        loss.backward()\n        total += loss.detach()\n",
                     "        loss = loss / accum_steps\n        loss.backward()\n"
                     "        total += loss.detach()\n")), "wrong-value"),
        ),
        judge=_judge_accumulation_bugs,
    )
)
