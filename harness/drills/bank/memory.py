"""Drills on memory (lesson 13): bytes per parameter and of optimizer state, activations saved for backward and
how they grow with the batch, activation checkpointing, and gradient accumulation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from harness.contract.case import Case
from harness.contract.instruments import StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import explain, no_harness_shortcut, seeded_init
from harness.memory import saved_for_backward, static_memory


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
    explain(
        id="memory-adam-bytes",
        title="Training memory of a 1B-parameter model with AdamW",
        topics=("memory", "performance"),
        difficulty=1,
        question="A model of 1 billion parameters is trained in float32 with AdamW. How much memory do the "
        "parameters, their gradients and the optimizer state take, before any activation?",
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


def adam_models(case: Case) -> list[nn.Module]:
    """Two adapted embedding models of sizes drawn by the case, whose Adam state the drill counts."""
    generator = torch.Generator().manual_seed(case.seeded(70))
    models = []
    for _ in range(2):
        vocab = int(torch.randint(50, 200, (), generator=generator))
        models.append(_Adapted(vocab, int(torch.randint(8, 33, (), generator=generator))))
    return models


def _probe_adam_state(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    return {"bytes": [answer["adam_state_bytes"](model) for model in adam_models(case)]}


_ADAM_STARTER = '''import torch


def adam_state_bytes(model):
    """Bytes of the exp_avg and exp_avg_sq buffers AdamW(model.parameters()) creates at its first step (not the
    step counters), computed from the model alone, before any optimizer exists."""
    raise NotImplementedError
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
        hints=("Which parameters get a gradient, how many times does model.parameters() list a tied weight, and "
               "what dtype does a moment buffer have?",
               "sum(2 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)"),
        probe=_probe_adam_state,
    )
)


# ---------------------------------------------------------------------------------------------------- activation bytes
class _Gated(nn.Module):
    """A gated unit: the product saves `a`, a view of half of its input's storage (which it keeps whole)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a, b = h.chunk(2, dim=-1)
        return a * torch.sigmoid(b)


def activation_models(case: Case) -> list[tuple[nn.Module, torch.Tensor]]:
    """Three seeded models (an MLP, a deep GELU stack, a gated one), each with a batch of inputs."""
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
    return {"bytes": [answer["activation_bytes"](model, x) for model, x in activation_models(case)]}


_BYTES_STARTER = '''import torch


def activation_bytes(model, x):
    """Bytes of the tensors autograd saves for backward in model(x), parameters excluded, each storage once."""
    raise NotImplementedError()
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
        hints=("saved_tensors_hooks(pack, unpack) calls pack(tensor) for every tensor saved for backward; pack "
               "returns what to store (the tensor itself is fine).",
               "Key a dict by tensor.untyped_storage().data_ptr(): views and tensors saved twice share a storage."),
        probe=_probe_activation_bytes,
    )
)


# ---------------------------------------------------------------------------------------------------- checkpointing
def activation_checkpoint_inputs(case: Case) -> tuple[nn.ModuleList, torch.Tensor]:
    """Three seeded Tanh blocks and a batch of inputs, for activation checkpointing."""
    blocks = seeded_init(nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3)), case.seeded(80))
    generator = torch.Generator().manual_seed(case.seeded(81))
    return blocks, torch.randn(int(torch.randint(3, 9, (), generator=generator)), 8, generator=generator)


def _probe_checkpointed(answer: dict, *, case: Case) -> dict:
    forward = answer["checkpointed_forward"]
    blocks, x = activation_checkpoint_inputs(case)  # x is data: it does not require grad
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


# ---------------------------------------------------------------------------------------------------- accumulation
def uneven_inputs(case: Case) -> tuple[nn.Module, torch.Tensor, torch.Tensor, int]:
    """A seeded linear model, inputs and targets whose count the micro-batch size does not divide, and that size."""
    model = seeded_init(nn.Linear(3, 1), case.seeded(90))
    generator = torch.Generator().manual_seed(case.seeded(91))
    micro = int(torch.randint(3, 5, (), generator=generator))
    n = int(torch.randint(9, 16, (), generator=generator))
    n += n % micro == 0
    return model, torch.randn(n, 3, generator=generator), torch.randn(n, 1, generator=generator), micro


def _probe_uneven(answer: dict, *, case: Case) -> dict:
    model, x, y, micro = uneven_inputs(case)
    return {"gradient": answer["accumulated_gradient"](model, x, y, micro)}


UNEVEN_STARTER = '''import torch
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
        starter=UNEVEN_STARTER,
        hints=("With 10 rows in micro-batches of 4, 4 and 2, what share of the mean does the last one hold?",
               "Multiply each micro-batch's mean loss by len(xb) / len(x)."),
        probe=_probe_uneven,
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
    explain(
        id="memory-activations-vs-batch",
        title="What grows with the batch size?",
        topics=("memory", "performance"),
        difficulty=1,
        question="A model trains at batch size 32 in 10 GB of GPU memory: 4 GB for parameters, gradients and AdamW "
        "state, 6 GB for activations. About how much will batch size 64 need?",
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
    explain(
        id="memory-checkpoint-tradeoff",
        title="What does activation checkpointing cost?",
        topics=("memory", "performance"),
        difficulty=2,
        question="Every block of a deep network is wrapped in torch.utils.checkpoint.checkpoint(block, h, "
        "use_reentrant=False). Activation memory drops a lot. What is paid for it?",
        hints=("If the activations inside a block are not kept, where do they come from when backward needs them?",
               "Count the forward calls of each block with and without checkpointing."),
        experiment=_tradeoff_experiment,
    )
)


# ---------------------------------------------------------------------------------------------------- d3: accumulation
ACC_LR = 0.1


def acc_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]], int]:
    """A seeded Tanh MLP, its micro-batches and how many make one step, for the accumulation drill."""
    model = seeded_init(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), case.seeded(100))
    generator = torch.Generator().manual_seed(case.seeded(101))
    accum = int(torch.randint(2, 5, (), generator=generator))
    groups = int(torch.randint(2, 4, (), generator=generator))
    micro = [(torch.randn(4, 4, generator=generator), torch.randn(4, 2, generator=generator))
             for _ in range(accum * groups)]
    return model, micro, accum


def _probe_accumulation_bugs(answer: dict, *, case: Case) -> dict:
    model, micro, accum = acc_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=ACC_LR)
    with StepRecorder(optimizer) as steps:
        mean_loss = answer["train_accumulated"](model, optimizer, micro, accum)
    return {"mean_loss": mean_loss, "steps": [{"params": r.params, "grads": r.grads} for r in steps.records],
            "final": [p.detach() for p in model.parameters()]}


ACC_STARTER = '''import torch
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
        starter=ACC_STARTER,
        hints=("Ask three questions: what is in .grad when step() runs? Is the accumulated gradient a mean or a sum? "
               "What does the returned value hold on to?",
               "zero_grad only after each step (and once before the loop); backward (loss / accum_steps); add "
               "loss.detach() to the total and return a float."),
        probe=_probe_accumulation_bugs,
    )
)
