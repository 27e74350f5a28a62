"""Drills on memory (lesson 13): bytes per parameter, activations saved for backward, activation checkpointing,
and gradient accumulation with uneven micro-batches."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice
from harness.memory import saved_for_backward, static_memory


# ------------------------------------------------------------------------------------------------ bytes per parameter
def _adam_experiment() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    nn.functional.cross_entropy(model(torch.randn(8, 256)), torch.randint(0, 10, (8,))).backward()
    optimizer.step()  # optimizer state is created at the first step
    memory = static_memory(model, optimizer)
    count = sum(p.numel() for p in model.parameters())
    print(f"{count} float32 parameters with AdamW after one step: " + ", ".join(
        f"{key} {value / count:.2f} bytes per parameter" for key, value in memory.items()))
    print("1 billion parameters at 16 bytes each: 16 GB, before a single activation.")


add(
    multiple_choice(
        id="memory-adam-bytes",
        title="Training memory of a 1B-parameter model with AdamW",
        topics=("performance",),
        difficulty=1,
        prompt="A model of 1 billion parameters is trained in float32 with AdamW. How much memory do the parameters, "
        "their gradients and the optimizer state take, before any activation?\n"
        "  a) 4 GB: the parameters are all there is\n  b) 8 GB: parameters and gradients\n"
        "  c) 16 GB: parameters, gradients, and two moment estimates per parameter\n"
        "  d) 12 GB: parameters, gradients and one momentum buffer\n",
        correct="c",
        explanation="4 bytes of weight + 4 of gradient + 8 of AdamW moments (exp_avg, exp_avg_sq) = 16 bytes per "
        "parameter",
        hints=("What does AdamW keep for each parameter between steps?",
               "Two running averages (of the gradient and of its square), each the size of the parameter."),
        wrong=("a", "b", "d"),
        experiment=_adam_experiment,
    )
)


# ---------------------------------------------------------------------------------------------------- activation bytes
def _models() -> list[tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)])
    generator = torch.Generator().manual_seed(1)
    return [(mlp, torch.randn(7, 10, generator=generator)), (deep, torch.randn(5, 16, generator=generator))]


def _check_activation_bytes(ns: dict) -> str:
    activation_bytes = ns["activation_bytes"]
    for model, x in _models():
        with saved_for_backward(exclude=model.parameters()) as saved:
            model(x).sum()
        with saved_for_backward() as everything:
            model(x).sum()
        got = activation_bytes(model, x)
        if not isinstance(got, int):
            fail("not-an-int", observed=f"returned {type(got).__name__}", expected="an int number of bytes",
                 cause="a tensor or float sum", where="the return statement")
        if got != saved.bytes:
            cause = ("the weights that linear layers save were counted: leave out tensors that share a storage with "
                     "a parameter" if got == everything.bytes else
                     "a storage saved by two operations (an activation saved by one layer and by the next) was "
                     "counted twice: key by tensor.untyped_storage().data_ptr()" if got > saved.bytes else
                     "some saved tensors were missed (is the forward inside the hooks' with block?)")
            fail("wrong-bytes", observed=f"{got} bytes for {type(model).__name__} on a batch of {len(x)}",
                 expected=f"{saved.bytes} bytes of activations (parameters excluded, each storage once)",
                 cause=cause, where="the pack hook")
    return "activation bytes saved for backward, each storage once, parameters left out"


_BYTES_STARTER = '''import torch


def activation_bytes(model, x):
    """Bytes of the tensors autograd saves for backward in model(x), parameters excluded, each storage once."""
    raise NotImplementedError()
'''

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

add(
    Drill(
        id="memory-activation-bytes",
        title="Measure the activations a forward keeps",
        kind="write",
        topics=("performance",),
        difficulty=2,
        prompt="Write activation_bytes(model, x): the bytes of the tensors autograd saves for backward during "
        "model(x), counted through torch.autograd.graph.saved_tensors_hooks, leaving out tensors that share a "
        "storage with a parameter, and counting each storage once. Return an int.",
        entry="activation_bytes",
        starter=_BYTES_STARTER,
        solution=_BYTES_SOLUTION,
        hints=("saved_tensors_hooks(pack, unpack) calls pack(tensor) for every tensor saved for backward; pack "
               "returns what to store (the tensor itself is fine).",
               "Key a dict by tensor.untyped_storage().data_ptr(): views and tensors saved twice share a storage."),
        check=_check_activation_bytes,
        wrong_answers=(
            _BYTES_SOLUTION.replace("        if storage.data_ptr() not in params:\n            storages",
                                    "        storages"),
            _BYTES_SOLUTION.replace("storages[storage.data_ptr()] = storage.nbytes()",
                                    "storages[len(storages)] = tensor.nbytes"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- checkpointing
def _check_checkpointed(ns: dict) -> str:
    forward = ns["checkpointed_forward"]
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3))
    x = torch.randn(4, 8)  # data: it does not require grad
    out = forward(blocks, x)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        fail("no-grads", observed="the output does not require grad", expected="gradients for every parameter",
             cause="the reentrant checkpoint (use_reentrant=True) with an input that does not require grad: it "
             "returns an output cut off from the parameters", where="the checkpoint call: use_reentrant=False")
    out.sum().backward()
    got = [p.grad.clone() for p in blocks.parameters()]
    blocks.zero_grad(set_to_none=True)
    h = x
    for block in blocks:
        h = block(h)
    h.sum().backward()
    if not all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(got, blocks.parameters(), strict=True)):
        fail("wrong-grads", observed="the gradients differ from the plain forward's", expected="the same gradients",
             cause="a block skipped or applied twice", where="the loop over blocks")
    with saved_for_backward(exclude=blocks.parameters()) as saved:
        forward(blocks, x)
    if saved.bytes > 3 * x.numel() * 4:
        fail("not-checkpointed", observed=f"{saved.bytes} bytes kept for backward",
             expected=f"at most {3 * x.numel() * 4}: each block's input", cause="a block runs outside checkpoint",
             where="the loop over blocks")
    return "non-reentrant checkpointing: gradients reach the parameters, only block inputs kept"


_CHECKPOINT_STARTER = '''from torch.utils.checkpoint import checkpoint


def checkpointed_forward(blocks, x):
    """Symptom: training runs, the loss never moves, and a warning says 'None of the inputs have requires_grad'."""
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=True)
    return h
'''

add(
    Drill(
        id="memory-checkpoint-reentrant",
        title="Bug hunt: activation checkpointing that stops training",
        kind="bughunt",
        topics=("performance",),
        difficulty=2,
        prompt="checkpointed_forward saves memory, but after adding it the model stops learning: the parameters get "
        "no gradient. Fix it so that every block stays checkpointed and the gradients equal the plain forward's.",
        entry="checkpointed_forward",
        starter=_CHECKPOINT_STARTER,
        solution=_CHECKPOINT_STARTER.replace("use_reentrant=True", "use_reentrant=False"),
        hints=("Does the input x require grad? What does the reentrant variant do when no input does?",
               "use_reentrant=False tracks the parameters' gradients whatever the inputs."),
        check=_check_checkpointed,
        wrong_answers=(
            _CHECKPOINT_STARTER.replace("h = checkpoint(block, h, use_reentrant=True)",
                                        "h = block(h) if block is blocks[-1] else checkpoint(block, h, "
                                        "use_reentrant=False)"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- accumulation
def _check_uneven(ns: dict) -> str:
    gradient = ns["accumulated_gradient"]
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(10, 3, generator=generator), torch.randn(10, 1, generator=generator)
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    got = gradient(model, x, y, 4)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        fail("wrong-shape", observed=f"returned {type(got).__name__}", expected=f"a flat tensor of {want.numel()}",
             cause="not the flattened .grad of every parameter", where="the return statement")
    if not torch.allclose(got, want, atol=1e-6):
        fail("wrong-value", observed="the accumulated gradient differs from the full batch's (10 rows, micro-batches "
             "of 4, 4 and 2)", expected="the gradient of the mean loss over all 10 rows",
             cause="each micro-batch divided by the number of micro-batches: the 2-row one weighs as much as a 4-row "
             "one. Weight by len(chunk) / len(x)", where="the factor on each micro-batch's loss")
    return "the full batch's gradient from uneven micro-batches"


_UNEVEN_STARTER = '''import torch
from torch import nn


def accumulated_gradient(model, x, y, micro_batch_size):
    """The gradient of the mean MSE over (x, y), accumulated in micro-batches. Symptom: it differs from the
    full batch's gradient whenever len(x) is not a multiple of micro_batch_size."""
    chunks = list(zip(x.split(micro_batch_size), y.split(micro_batch_size)))
    for xb, yb in chunks:
        (nn.functional.mse_loss(model(xb), yb) / len(chunks)).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])
'''

add(
    Drill(
        id="memory-uneven-accumulation",
        title="Bug hunt: accumulation with a smaller last micro-batch",
        kind="bughunt",
        topics=("performance", "loop"),
        difficulty=2,
        prompt="accumulated_gradient should equal the gradient of the mean loss over the whole batch, as a batch "
        "too large for memory would give. It does when the micro-batches are equal, not otherwise. Fix it.",
        entry="accumulated_gradient",
        starter=_UNEVEN_STARTER,
        solution=_UNEVEN_STARTER.replace("/ len(chunks)", "* (len(xb) / len(x))"),
        hints=("With 10 rows in micro-batches of 4, 4 and 2, what share of the mean does the last one hold?",
               "Multiply each micro-batch's mean loss by len(xb) / len(x)."),
        check=_check_uneven,
        wrong_answers=(_UNEVEN_STARTER.replace("/ len(chunks)", ""),),
    )
)

