"""Drills on FSDP and ZeRO sharding: which piece of the flat parameters each rank holds, how the full parameters
are gathered back, and a ZeRO-1 step (averaged gradients, a sharded optimizer state, an all_gather of the
updated shards). The probes run real gloo ranks on CPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.wire import describe
from harness.drills.core import Drill, add
from harness.drills.support import explain, run_on_two_ranks

SHARD_WORLDS = (2, 3, 4)


def _param_shapes(case: Case) -> list[tuple[int, ...]]:
    """Three parameters whose total size is odd, so no world size of 2 or 4 divides it (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    rows, cols, extra = (int(torch.randint(2, 6, (), generator=gen)) for _ in range(3))
    shapes = [(rows, cols), (cols,), (extra, 3)]
    if sum(torch.Size(s).numel() for s in shapes) % 2 == 0:
        shapes.append((1,))
    return shapes


def case_params(case: Case) -> list[torch.Tensor]:
    """The parameters: the same values on every rank and in the judge."""
    gen = torch.Generator().manual_seed(case.seeded(1))
    return [torch.randn(shape, generator=gen).requires_grad_() for shape in _param_shapes(case)]


def flat_detached(tensors: list[torch.Tensor]) -> torch.Tensor:
    """`tensors` flattened and concatenated into one detached 1-D tensor."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def padded_flat(flat: torch.Tensor, world: int) -> torch.Tensor:
    """`flat` zero-padded at the end to a multiple of `world`."""
    return F.pad(flat, (0, (-flat.numel()) % world))


def rank_shard(flat: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The reference: the flat vector zero-padded at its end to a multiple of `world`, piece `rank` of `world`."""
    padded = padded_flat(flat, world)
    size = padded.numel() // world
    return padded[rank * size:(rank + 1) * size]


def _rank_lists(tensors: Any) -> list:
    """Tensors as nested lists: a rank returns plain data (a tensor sent through a queue shares memory with a
    rank that may have exited by the time it is read)."""
    return [t.detach().tolist() if isinstance(t, torch.Tensor) else describe(t) for t in tensors]


# --- shard_flat ----------------------------------------------------------------------------------------------

def _probe_shard_flat(answer: dict, *, case: Case) -> dict:
    params = case_params(case)
    return {"shards": [[answer["shard_flat"](params, rank, world) for rank in range(world)] for world in SHARD_WORLDS]}


SHARD_STARTER = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def shard_flat(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:\n"
    "    raise NotImplementedError\n"
)


add(
    Drill(
        id="ddp-shard-flat",
        title="Shard the flat parameters as FSDP and ZeRO do",
        kind="write",
        topics=("ddp",),
        difficulty=2,
        prompt="FSDP (and ZeRO) keep on each rank one piece of the model's parameters, flattened into one vector. "
        "Write shard_flat(params, rank, world): concatenate the flattened parameters in order, zero-pad the end to "
        "a multiple of world, and return this rank's piece: the rank-th of world equal, contiguous pieces, as a "
        "1-D tensor. The total size is usually not a multiple of world.",
        entry="shard_flat",
        starter=SHARD_STARTER,
        hints=("Collectives such as all_gather need the same number of elements on every rank.",
               "flat = torch.cat of p.reshape(-1); pad with (-n) % world zeros; size = len // world; "
               "return flat[rank * size:(rank + 1) * size]."),
        probe=_probe_shard_flat,
    )
)


# --- gather the full parameters --------------------------------------------------------------------------------

def _probe_gather_full_params(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> list:
        params = case_params(case)
        shard = rank_shard(flat_detached(params), rank, 2).clone()
        return _rank_lists(answer["gather_params"](shard, [tuple(p.shape) for p in params]))

    return {"ranks": run_on_two_ranks(work)}


GATHER_STARTER = (
    "import torch\nimport torch.distributed as dist\n\n\n"
    "def gather_params(shard: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:\n"
    "    raise NotImplementedError\n"
)


add(
    Drill(
        id="ddp-gather-full-params",
        title="Gather the full parameters from their shards",
        kind="write",
        topics=("ddp",),
        difficulty=2,
        prompt="Before a layer's forward, FSDP gathers its full parameters from every rank's shard. Inside an "
        "initialised process group, write gather_params(shard, shapes): shard is this rank's 1-D piece of the "
        "flattened parameters (equal contiguous pieces, in rank order, of the flat vector zero-padded at its end); "
        "shapes are the parameters' shapes in order. Return the full parameters, one tensor per shape, on every "
        "rank.",
        entry="gather_params",
        starter=GATHER_STARTER,
        hints=("all_gather fills a list of world tensors, one per rank, in rank order.",
               "torch.cat the gathered list, then cut sum-of-numels pieces at running offsets and reshape; the "
               "padding is what is left over."),
        probe=_probe_gather_full_params,
    )
)


# --- a ZeRO-1 step ---------------------------------------------------------------------------------------------

ZERO1_LR, ZERO1_BETA, ZERO1_STEPS = 0.1, 0.9, 3


def zero_grads(case: Case, step: int, rank: int) -> list[torch.Tensor]:
    """Rank `rank`'s local gradients at `step` (the ranks' gradients differ, as their batches do)."""
    gen = torch.Generator().manual_seed(case.seeded(100 + 10 * step + rank))
    return [torch.randn(shape, generator=gen) for shape in _param_shapes(case)]


def _probe_zero1(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> dict:
        params = case_params(case)
        shard_size = padded_flat(flat_detached(params), 2).numel() // 2
        momentum = torch.zeros(shard_size)
        trace = []
        for step in range(ZERO1_STEPS):
            for p, g in zip(params, zero_grads(case, step, rank), strict=True):
                p.grad = g
            answer["zero1_step"](params, momentum, ZERO1_LR, ZERO1_BETA)
            trace.append(flat_detached(params).tolist())
        return {"params": trace, "momentum": momentum.tolist()}

    return {"ranks": run_on_two_ranks(work)}


ZERO1_STARTER = (
    "import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n\n\n"
    "def zero1_step(params, momentum, lr, beta):\n"
    "    raise NotImplementedError\n"
)


add(
    Drill(
        id="ddp-zero1-step",
        title="A ZeRO-1 optimizer step across two ranks",
        kind="write",
        topics=("ddp",),
        difficulty=3,
        prompt="ZeRO stage 1 keeps the full parameters on every rank but splits the optimizer state. Inside an "
        "initialised process group, write zero1_step(params, momentum, lr, beta): one step of SGD with momentum "
        "(m = beta * m + g; p -= lr * m) where g is the gradient averaged over the ranks (each rank's p.grad holds "
        "its own local gradient). Shards are the equal contiguous pieces, in rank order, of the flattened "
        "parameters zero-padded at the end to a multiple of the world size. momentum is this rank's shard of the "
        "momentum buffer (zeros at first): update it in place. Each rank updates only its shard of the parameters; "
        "afterwards every rank must hold all the updated parameters, in place.",
        entry="zero1_step",
        starter=ZERO1_STARTER,
        hints=("Three collectives' worth of thinking: what must every rank agree on before the update (the "
               "gradient), what does each rank change alone (its shard), what must every rank receive after?",
               "all_reduce the flat gradient and divide by the world size; update momentum and your shard in place "
               "(mul_, add_); all_gather the updated shards, torch.cat them and copy_ the pieces into the "
               "parameters under no_grad."),
        probe=_probe_zero1,
    )
)


# --- what each FSDP rank holds (explain) -------------------------------------------------------------------------

def _fsdp_experiment() -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def work(rank: int) -> str:
        torch.manual_seed(0)
        model = nn.Linear(6, 4)
        reference = nn.Linear(6, 4)
        reference.load_state_dict(model.state_dict())
        fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
        held = tuple(model.weight.to_local().shape)
        inputs = [torch.randn(3, 6, generator=torch.Generator().manual_seed(r)) for r in (0, 1)]
        model(inputs[rank]).sum().backward()
        for x in inputs:  # the averaged gradient, computed on one process with both ranks' batches
            (reference(x).sum() / 2).backward()
        grad = model.weight.grad.to_local()
        rows = slice(rank * 2, rank * 2 + 2)
        agrees = torch.allclose(grad, reference.weight.grad[rows], atol=1e-6)
        dist.barrier()
        return (f"rank {rank}: holds weight rows {rows.start}-{rows.stop - 1}, shape {held} of (4, 6); after "
                f"backward its .grad has shape {tuple(grad.shape)} and equals those rows of the averaged "
                f"gradient: {agrees}")

    for line in run_on_two_ranks(work):
        print(line)
    print("Forward and backward all-gather the full weight for the layer's own computation and free it after; "
          "backward reduce-scatters the gradients: each rank keeps the average of its own rows only.")


add(
    explain(
        id="ddp-fsdp-what-each-rank-holds",
        title="What an FSDP rank holds between steps",
        topics=("ddp", "memory"),
        difficulty=2,
        question="A model is wrapped with FSDP (full sharding) on 2 ranks. Between two steps, what does each rank "
        "hold of a layer's weight, and what does backward leave in that weight's .grad?",
        hints=("FSDP saves memory on parameters, gradients and optimizer state alike. Which collective leaves each "
               "rank only its piece of a sum?",
               "all_gather before use, reduce_scatter of the gradients after backward."),
        experiment=_fsdp_experiment,
    )
)
