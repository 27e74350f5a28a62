"""Drills on memory (lesson 13): bytes per parameter and of optimizer state, activations saved for backward and
how they grow with the batch, activation checkpointing, and gradient accumulation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from harness.contract.case import Case
from harness.contract.compare import close_tensors, close_values
from harness.contract.failure import fail
from harness.contract.instruments import StepRecorder
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import assert_close, multiple_choice, no_harness_shortcut, seeded_init, with_fixes
from harness.memory import saved_for_backward, static_memory

# ------------------------------------------------------------------------------------------------ shared helpers
_TOLERANCE = {"atol": 1e-6, "rtol": 1e-4, "dtype": False}  # for every list of tensors compared here


# ------------------------------------------------------------------------------------------------ bytes per parameter
def _adam_experiment() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    F.cross_entropy(model(torch.randn(8, 256)), torch.randint(0, 10, (8,))).backward()
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
        topics=("memory", "performance"),
        difficulty=1,
        question="A model of 1 billion parameters is trained in float32 with AdamW. How much memory do the "
        "parameters, their gradients and the optimizer state take, before any activation?",
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
        hints=("What does AdamW keep for each parameter between steps?",
               "Two running averages (of the gradient and of its square), each the size of the parameter."),
        experiment=_adam_experiment,
    )
)


# ------------------------------------------------------------------------------------------------ Adam state bytes
class _Adapted(nn.Module):
    """An embedding tied to the output layer, a frozen norm, and a bfloat16 adapter."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width).requires_grad_(False)  # frozen: no gradient, so no Adam state
        self.adapter = nn.Linear(width, width, dtype=torch.bfloat16)
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.embed.weight  # tied: one tensor, one state

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(tokens))
        return self.out(h + self.adapter(h.bfloat16()).float())


def _adam_models(case: Case) -> list[nn.Module]:
    generator = torch.Generator().manual_seed(case.seeded(70))
    models = []
    for _ in range(2):
        vocab = int(torch.randint(50, 200, (), generator=generator))
        models.append(_Adapted(vocab, int(torch.randint(8, 33, (), generator=generator))))
    return models


def _probe_adam_state(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    return {"bytes": [answer["adam_state_bytes"](model) for model in _adam_models(case)]}


def _judge_adam_state(seen: dict, *, case: Case) -> str:
    got_all = seen.get("bytes")
    models = _adam_models(case)
    if not isinstance(got_all, list) or len(got_all) != len(models):
        raise WireError("malformed observation")
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


_ADAM_STARTER = '''import torch


def adam_state_bytes(model):
    """Bytes of the exp_avg and exp_avg_sq buffers AdamW(model.parameters()) creates at its first step (not the
    step counters), computed from the model alone, before any optimizer exists."""
    raise NotImplementedError
'''

_ADAM_SOLUTION = '''import torch


def adam_state_bytes(model):
    # model.parameters() lists a tied weight once; a frozen parameter never gets a gradient, so no state
    return sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
'''

add(
    Drill(
        id="memory-adam-state-bytes",
        title="Bytes of AdamW's state, before it exists",
        kind="write",
        topics=("memory",),
        difficulty=1,
        prompt="Write adam_state_bytes(model): the bytes of the exp_avg and exp_avg_sq buffers that AdamW("
        "model.parameters()) will create at its first step (leave out its step counters), computed from the model "
        "alone. The model may hold frozen parameters, tied weights and parameters of several dtypes.",
        entry="adam_state_bytes",
        starter=_ADAM_STARTER,
        solution=_ADAM_SOLUTION,
        hints=("Which parameters get a gradient, how many times does model.parameters() list a tied weight, and "
               "what dtype does a moment buffer have?",
               "sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)"),
        probe=_probe_adam_state,
        judge=_judge_adam_state,
        wrong_answers=(
            (_ADAM_SOLUTION.replace(" if p.requires_grad)", ")"), "wrong-bytes"),
            (_ADAM_SOLUTION.replace("p.element_size()", "4"), "wrong-bytes"),
            (_ADAM_SOLUTION.replace("for p in model.parameters()",
                                    "for _, p in model.named_parameters(remove_duplicate=False)"), "wrong-bytes"),
            (_ADAM_SOLUTION.replace("return sum(2 *", "return sum(1 *"), "wrong-bytes"),
            ('''from harness.memory import optimizer_state_bytes
import torch


def adam_state_bytes(model):
    optimizer = torch.optim.AdamW(model.parameters())
    return optimizer_state_bytes(optimizer)
''', "harness-import"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- activation bytes
class _Gated(nn.Module):
    """A gated unit: the product saves `a`, a view of half of its input's storage (which it keeps whole)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a, b = h.chunk(2, dim=-1)
        return a * torch.sigmoid(b)


def _activation_models(case: Case) -> list[tuple[nn.Module, torch.Tensor]]:
    mlp = seeded_init(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3)),
                   case.seeded(0))
    deep = seeded_init(nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)]), case.seeded(1))
    gated = seeded_init(nn.Sequential(nn.Linear(10, 32), _Gated(), nn.Linear(16, 3)), case.seeded(3))
    generator = torch.Generator().manual_seed(case.seeded(2))
    sizes = [int(v) for v in torch.randint(3, 17, (3,), generator=generator)]
    return [(mlp, torch.randn(sizes[0], 10, generator=generator)),
            (deep, torch.randn(sizes[1], 16, generator=generator)),
            (gated, torch.randn(sizes[2], 10, generator=generator))]


def _probe_activation_bytes(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    return {"bytes": [answer["activation_bytes"](model, x) for model, x in _activation_models(case)]}


def _judge_activation_bytes(seen: dict, *, case: Case) -> str:
    got_all = seen.get("bytes")
    models = _activation_models(case)
    if not isinstance(got_all, list) or len(got_all) != len(models):
        raise WireError("malformed observation")
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
        topics=("memory", "performance"),
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
        probe=_probe_activation_bytes,
        judge=_judge_activation_bytes,
        wrong_answers=(
            (_BYTES_SOLUTION.replace("        if storage.data_ptr() not in params:\n            storages",
                                     "        storages"), "wrong-bytes"),
            (_BYTES_SOLUTION.replace("storages[storage.data_ptr()] = storage.nbytes()",
                                     "storages[len(storages)] = tensor.nbytes"), "wrong-bytes"),
            (_BYTES_SOLUTION.replace("storages[storage.data_ptr()] = storage.nbytes()",
                                     "storages[tensor.data_ptr()] = tensor.nbytes"), "wrong-bytes"),
            (_BYTES_SOLUTION.replace("return sum(storages.values())", "return sum(storages.values()) / 1.0"),
             "not-an-int"),
            ('''from harness.memory import saved_for_backward


def activation_bytes(model, x):
    with saved_for_backward(exclude=model.parameters()) as saved:
        model(x)
    return saved.bytes
''', "harness-import"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- checkpointing
def _activation_checkpoint_inputs(case: Case) -> tuple[nn.ModuleList, torch.Tensor]:
    blocks = seeded_init(nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3)), case.seeded(80))
    generator = torch.Generator().manual_seed(case.seeded(81))
    return blocks, torch.randn(int(torch.randint(3, 9, (), generator=generator)), 8, generator=generator)


def _probe_checkpointed(answer: dict, *, case: Case) -> dict:
    forward = answer["checkpointed_forward"]
    blocks, x = _activation_checkpoint_inputs(case)  # x is data: it does not require grad
    out = forward(blocks, x)
    requires_grad = isinstance(out, torch.Tensor) and out.requires_grad
    grads = None
    if requires_grad:
        out.sum().backward()
        grads = [None if p.grad is None else p.grad for p in blocks.parameters()]
    with saved_for_backward(exclude=blocks.parameters()) as saved:  # what only this process can see
        forward(blocks, x)
    return {"out": out.detach() if isinstance(out, torch.Tensor) else out, "requires_grad": requires_grad,
            "grads": grads, "saved_bytes": saved.bytes}


def _judge_checkpointed(seen: dict, *, case: Case) -> str:
    blocks, x = _activation_checkpoint_inputs(case)
    h = x
    for block in blocks:
        h = block(h)
    h.sum().backward()
    assert_close("checkpointed_forward(blocks, x)", seen.get("out"), h.detach(), atol=1e-6, rtol=1e-5,
                 where="the loop over blocks", cause="a block skipped or applied twice")
    if seen.get("requires_grad") is not True:
        fail("no-grads", observed="the output does not require grad", expected="gradients for every parameter",
             cause="the reentrant checkpoint (use_reentrant=True) with an input that does not require grad: it "
             "returns an output cut off from the parameters", where="the checkpoint call: use_reentrant=False")
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
        topics=("memory", "performance"),
        difficulty=2,
        prompt="checkpointed_forward saves memory, but after adding it the model stops learning: the parameters get "
        "no gradient. Fix it so that every block stays checkpointed and the gradients equal the plain forward's.",
        entry="checkpointed_forward",
        starter=_CHECKPOINT_STARTER,
        solution=_CHECKPOINT_STARTER.replace("use_reentrant=True", "use_reentrant=False"),
        hints=("Does the input x require grad? What does the reentrant variant do when no input does?",
               "use_reentrant=False tracks the parameters' gradients whatever the inputs."),
        probe=_probe_checkpointed,
        judge=_judge_checkpointed,
        wrong_answers=(
            (_CHECKPOINT_STARTER.replace("h = checkpoint(block, h, use_reentrant=True)",
                                         "h = block(h) if block is blocks[-1] else checkpoint(block, h, "
                                         "use_reentrant=False)"), "not-checkpointed"),
            (_CHECKPOINT_STARTER.replace("h = checkpoint(block, h, use_reentrant=True)", "h = block(h)"),
             "not-checkpointed"),
            (_CHECKPOINT_STARTER.replace("h = checkpoint(block, h, use_reentrant=True)",
                                         "h = checkpoint(block, h.detach(), use_reentrant=False)"), "wrong-grads"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- accumulation
def _uneven_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor, int]:
    model = seeded_init(nn.Linear(3, 1), case.seeded(90))
    generator = torch.Generator().manual_seed(case.seeded(91))
    micro = int(torch.randint(3, 5, (), generator=generator))
    n = int(torch.randint(9, 16, (), generator=generator))
    n += n % micro == 0
    return model, torch.randn(n, 3, generator=generator), torch.randn(n, 1, generator=generator), micro


def _probe_uneven(answer: dict, *, case: Case) -> dict:
    model, x, y, micro = _uneven_inputs(case)
    return {"gradient": answer["accumulated_gradient"](model, x, y, micro)}


def _chunk_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, micro: int) -> list[torch.Tensor]:
    """The gradient of each micro-batch's own mean loss, flattened."""
    grads = []
    for xb, yb in zip(x.split(micro), y.split(micro), strict=True):
        model.zero_grad(set_to_none=True)
        F.mse_loss(model(xb), yb).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return grads


def _judge_uneven(seen: dict, *, case: Case) -> str:
    model, x, y, micro = _uneven_inputs(case)
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
    assert_close("the accumulated gradient", got, want, atol=1e-6, rtol=1e-5,
                 where="the factor on each micro-batch's loss",
                 cause=f"each micro-batch must weigh by its share of the rows: {len(x)} rows in micro-batches of "
                 f"{sizes}. Multiply each micro-batch's mean loss by len(xb) / len(x)")
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
        topics=("memory", "performance", "loop"),
        difficulty=2,
        prompt="accumulated_gradient should equal the gradient of the mean loss over the whole batch, as a batch "
        "too large for memory would give. It does when the micro-batches are equal, not otherwise. Fix it.",
        entry="accumulated_gradient",
        starter=_UNEVEN_STARTER,
        solution=_UNEVEN_STARTER.replace("/ len(chunks)", "* (len(xb) / len(x))"),
        hints=("With 10 rows in micro-batches of 4, 4 and 2, what share of the mean does the last one hold?",
               "Multiply each micro-batch's mean loss by len(xb) / len(x)."),
        probe=_probe_uneven,
        judge=_judge_uneven,
        wrong_answers=(
            (_UNEVEN_STARTER.replace("/ len(chunks)", ""), "losses-summed"),
            (_UNEVEN_STARTER.replace("(nn.functional.mse_loss(model(xb), yb) / len(chunks))",
                                     "(nn.functional.mse_loss(model(xb), yb, reduction='sum') / micro_batch_size)"),
             "divided-by-micro-batch-size"),
        ),
    )
)


# ---------------------------------------------------------------------------------------------------- explain drills
def _batch_experiment() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    optimizer = torch.optim.AdamW(model.parameters())
    for batch in (32, 64):
        with saved_for_backward(exclude=model.parameters()) as saved:
            loss = model(torch.randn(batch, 256)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        fixed = static_memory(model, optimizer)["total"]
        print(f"batch {batch}: activations {saved.bytes / 2**20:.2f} MiB, parameters + gradients + AdamW "
              f"{fixed / 2**20:.2f} MiB (measured now)")
    print("the activations double with the batch; the parameters, gradients and optimizer state do not.")


add(
    multiple_choice(
        id="memory-activations-vs-batch",
        title="What grows with the batch size?",
        topics=("memory", "performance"),
        difficulty=1,
        question="A model trains at batch size 32 in 10 GB of GPU memory: 4 GB for parameters, gradients and AdamW "
        "state, 6 GB for activations. About how much will batch size 64 need?",
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
        hints=("Which of the four kinds of memory has a batch dimension?",
               "Parameters, gradients and optimizer state are sized by the model; activations by model x batch."),
        experiment=_batch_experiment,
    )
)


class _Counted(nn.Module):
    """A block that counts its forward calls (recomputations included)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.block, self.calls = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)), 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.block(h)


def _tradeoff_experiment() -> None:
    torch.manual_seed(0)
    blocks = nn.ModuleList(_Counted(128) for _ in range(6))
    x = torch.randn(64, 128)
    for use_checkpoint in (False, True):
        for block in blocks:
            block.calls = 0
        with saved_for_backward(exclude=blocks.parameters()) as saved:
            h = x
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False) if use_checkpoint else block(h)
        h.sum().backward()
        calls = sum(block.calls for block in blocks)
        print(f"checkpointing {'on ' if use_checkpoint else 'off'}: {saved.bytes / 2**10:7.0f} KiB kept for backward, "
              f"{calls} block forwards for one forward + backward (measured now)")
    print("checkpointing keeps each block's input only, and runs each block's forward again during backward.")


add(
    multiple_choice(
        id="memory-checkpoint-tradeoff",
        title="What does activation checkpointing cost?",
        topics=("memory", "performance"),
        difficulty=2,
        question="Every block of a deep network is wrapped in torch.utils.checkpoint.checkpoint(block, h, "
        "use_reentrant=False). Activation memory drops a lot. What is paid for it?",
        options=(
            ("compute: block forwards rerun in backward", "only each block's input is kept; during backward every "
             "block's forward runs again to rebuild its activations: about one extra forward pass"),
            ("accuracy: the gradients become approximate", "the recomputed activations are the same values (the RNG "
             "state is replayed for dropout): the gradients are exact"),
            ("parameter memory: the weights are copied", "checkpointing touches only activations; the weights, their "
             "gradients and the optimizer state are unchanged"),
            ("nothing: activations move to CPU memory", "that is offloading, another technique; checkpointing drops "
             "the activations and recomputes them"),
        ),
        key="a",
        hints=("If the activations inside a block are not kept, where do they come from when backward needs them?",
               "Count the forward calls of each block with and without checkpointing."),
        experiment=_tradeoff_experiment,
    )
)


# ---------------------------------------------------------------------------------------------------- d3: accumulation
_ACC_LR = 0.1


def _acc_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]], int]:
    model = seeded_init(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), case.seeded(100))
    generator = torch.Generator().manual_seed(case.seeded(101))
    accum = int(torch.randint(2, 5, (), generator=generator))
    groups = int(torch.randint(2, 4, (), generator=generator))
    micro = [(torch.randn(4, 4, generator=generator), torch.randn(4, 2, generator=generator))
             for _ in range(accum * groups)]
    return model, micro, accum


def _probe_accumulation_bugs(answer: dict, *, case: Case) -> dict:
    model, micro, accum = _acc_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=_ACC_LR)
    with StepRecorder(optimizer) as steps:
        mean_loss = answer["train_accumulated"](model, optimizer, micro, accum)
    return {"mean_loss": mean_loss, "steps": [{"params": r.params, "grads": r.grads} for r in steps.records],
            "final": [p.detach() for p in model.parameters()]}


def _judge_accumulation_bugs(seen: dict, *, case: Case) -> str:
    model, micro, accum = _acc_inputs(case)
    params = list(model.parameters())
    records = seen.get("steps")
    groups = [micro[i:i + accum] for i in range(0, len(micro), accum)]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise WireError("malformed step records")
    if len(records) != len(groups):
        fail("wrong-step-count", observed=f"{len(records)} optimizer steps for {len(micro)} micro-batches",
             expected=f"{len(groups)}: one step per {accum} micro-batches", cause="a step at every micro-batch, or "
             "none at the end of a group", where="if (i + 1) % accum_steps == 0: step, then zero_grad")
    losses = []
    for step, (record, group) in enumerate(zip(records, groups, strict=True)):
        got_params, got_grads = record.get("params"), record.get("grads")
        if not isinstance(got_params, list) or not isinstance(got_grads, list):
            raise WireError("malformed step record")
        if len(got_params) != len(params) or not close_tensors(got_params, [p.detach() for p in params], **_TOLERANCE):
            fail("wrong-updates", observed=f"before step {step} the weights differ from the reference's",
                 expected=f"w <- w - {_ACC_LR} * the group's mean gradient", cause="an extra update, or a wrong "
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
                 where="zero_grad right after step(), not before it")
        if close_tensors(got_grads, want, **_TOLERANCE):
            pass
        elif close_tensors(got_grads, [g * accum for g in want], **_TOLERANCE):
            fail("unscaled-accumulation", observed=f"at step {step} the gradient is {accum} times the mean over "
                 f"the group's {accum} micro-batches", expected="the gradient of the mean loss over the group, as one "
                 f"batch {accum} times larger would give", cause="each micro-batch's loss is backpropagated whole: "
                 "the gradients add up to a sum, so the effective learning rate grows with accum_steps",
                 where="divide each micro-batch's loss by accum_steps before backward()")
        elif (close_tensors(got_grads, [g / accum for g in per_micro[-1]], **_TOLERANCE)
              or close_tensors(got_grads, per_micro[-1], **_TOLERANCE)):
            fail("lost-micro-batches", observed=f"at step {step} the gradient holds only the group's last "
                 "micro-batch", expected=f"the {accum} micro-batches' gradients added up", cause="zero_grad() at "
                 "every micro-batch wipes what the earlier ones accumulated", where="zero_grad only after step()")
        else:
            fail("wrong-gradient", observed=f"the gradient at step {step} is not the group's mean gradient",
                 expected=f"the mean over the group's {accum} micro-batches", cause="the loss or its scaling differs",
                 where="the training loop")
        with torch.no_grad():
            for p, g in zip(params, want, strict=True):
                p -= _ACC_LR * g
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
             where="total += loss.detach(), and return total.item() / count")
    want_mean = sum(losses) / len(losses)
    if not isinstance(mean_loss, (int, float)) or isinstance(mean_loss, bool) or not abs(mean_loss - want_mean) <= 1e-5:
        fail("wrong-value", observed=f"returned {describe(mean_loss)}",
             expected=f"{want_mean:.6f}: the mean of the micro-batches' losses, as a float",
             cause="the scaled losses averaged, or not a float", where="what you add to the running total")
    return f"{len(groups)} steps, each on the mean gradient of {accum} micro-batches; the mean loss as a float"


_ACC_STARTER = '''import torch
import torch.nn.functional as F


def train_accumulated(model, optimizer, micro_batches, accum_steps):
    """Train with gradient accumulation: one optimizer step per accum_steps micro-batches (their number is a
    multiple of accum_steps), as if each group were one big batch. Returns the mean MSE over the micro-batches.

    Symptoms: with accum_steps=4 training behaves as with a batch 4 times smaller; a sweep over accum_steps needs
    a smaller learning rate for larger values; and the caller, who keeps a history of the returned losses, sees
    its memory grow epoch after epoch.
    """
    model.train()
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        total += loss
        if (i + 1) % accum_steps == 0:
            optimizer.step()
    return total / len(micro_batches)
'''

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
    return with_fixes(_ACC_STARTER, *(_ACC_FIXES[name] for name in names))


add(
    Drill(
        id="memory-accumulation-script",
        title="Bug hunt: gradient accumulation with three bugs",
        kind="bughunt",
        topics=("memory", "loop"),
        difficulty=3,
        prompt="train_accumulated trains a model too large for its batch in memory by accumulating gradients over "
        "accum_steps micro-batches: each step must equal one step on the group as a single batch (the mean loss "
        "over the group), and the function returns the mean loss as a Python float. It has three bugs, each with "
        "its own symptom (see the docstring). Fix all three; the check reports the first it observes.",
        entry="train_accumulated",
        starter=_ACC_STARTER,
        solution=_ACC_SOLUTION,
        hints=("Ask three questions: what is in .grad when step() runs? Is the accumulated gradient a mean or a sum? "
               "What does the returned value hold on to?",
               "zero_grad only after each step (and once before the loop); backward (loss / accum_steps); add "
               "loss.detach() to the total and return a float."),
        probe=_probe_accumulation_bugs,
        judge=_judge_accumulation_bugs,
        wrong_answers=(
            (_acc_fixed("scale", "graph"), "lost-micro-batches"),
            (_acc_fixed("zero_grad", "graph"), "unscaled-accumulation"),
            (_acc_fixed("zero_grad", "scale"), "graph-kept"),
            # the scaled loss added to the total: training is right, the reported loss is accum_steps times too small
            (_acc_fixed("zero_grad", "graph").replace("        loss.backward()\n        total += loss.detach()\n",
                                                      "        loss = loss / accum_steps\n        loss.backward()\n"
                                                      "        total += loss.detach()\n"), "wrong-value"),
        ),
    )
)
