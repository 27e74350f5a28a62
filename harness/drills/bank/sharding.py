"""Drills on FSDP and ZeRO sharding: which piece of the flat parameters each rank holds, how the full parameters
are gathered back, and a ZeRO-1 step (averaged gradients, a sharded optimizer state, an all_gather of the
updated shards). The probes run real gloo ranks on CPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_values, max_difference
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, run_on_two_ranks

_WORLDS = (2, 3, 4)


def _param_shapes(case: Case) -> list[tuple[int, ...]]:
    """Three parameters whose total size is odd, so no world size of 2 or 4 divides it (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    rows, cols, extra = (int(torch.randint(2, 6, (), generator=gen)) for _ in range(3))
    shapes = [(rows, cols), (cols,), (extra, 3)]
    if sum(torch.Size(s).numel() for s in shapes) % 2 == 0:
        shapes.append((1,))
    return shapes


def _params(case: Case) -> list[torch.Tensor]:
    """The parameters: the same values on every rank and in the judge."""
    gen = torch.Generator().manual_seed(case.seeded(1))
    return [torch.randn(shape, generator=gen).requires_grad_() for shape in _param_shapes(case)]


def _flat_detached(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _padded(flat: torch.Tensor, world: int) -> torch.Tensor:
    return F.pad(flat, (0, (-flat.numel()) % world))


def _shard(flat: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The reference: the flat vector zero-padded at its end to a multiple of `world`, piece `rank` of `world`."""
    padded = _padded(flat, world)
    size = padded.numel() // world
    return padded[rank * size:(rank + 1) * size]


def _rank_lists(tensors: Any) -> list:
    """Tensors as nested lists: a rank returns plain data (a tensor sent through a queue shares memory with a
    rank that may have exited by the time it is read)."""
    return [t.detach().tolist() if isinstance(t, torch.Tensor) else describe(t) for t in tensors]


# --- shard_flat ----------------------------------------------------------------------------------------------

def _probe_shard_flat(answer: dict, *, case: Case) -> dict:
    params = _params(case)
    return {"shards": [[answer["shard_flat"](params, rank, world) for rank in range(world)] for world in _WORLDS]}


def _strided(flat: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return _padded(flat, world)[rank::world]


def _per_parameter(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:
    return torch.cat([_shard(p.detach().reshape(-1), rank, world) for p in params])


def _judge_shard_flat(seen: dict, *, case: Case) -> str:
    params = _params(case)
    flat = _flat_detached(params)
    shards = seen.get("shards")
    if not (isinstance(shards, list) and len(shards) == len(_WORLDS)
            and all(isinstance(s, list) and len(s) == w for s, w in zip(shards, _WORLDS, strict=True))):
        raise WireError("malformed observation: not one shard per rank and world size")
    for world, got in zip(_WORLDS, shards, strict=True):
        where = f"shard_flat(params, rank, world={world})"
        for rank, shard in enumerate(got):
            if not isinstance(shard, torch.Tensor) or shard.dim() != 1:
                fail("not-flat", observed=f"rank {rank} of {world} got {describe(shard)}", expected="a 1-D tensor",
                     cause="the parameters were not flattened and concatenated into one vector", where=where)
        if all(close_values(s, _shard(flat, r, world), dtype=False) for r, s in enumerate(got)):
            continue
        sizes = [s.numel() for s in got]
        want = _padded(flat, world).numel() // world
        variants = (
            ("strided-shard", [_strided(flat, r, world) for r in range(world)],
             "every world-th element (flat[rank::world]): each rank holds scattered elements of every parameter, "
             "so a layer's weight cannot be rebuilt from one contiguous piece per rank"),
            ("per-parameter-shard", [_per_parameter(params, r, world) for r in range(world)],
             "each parameter padded and split on its own: a flat-parameter shard is one contiguous piece of the "
             "concatenation, padded once at its end"),
        )
        for code, want_shards, cause in variants:
            if all(close_values(s, w, dtype=False) for s, w in zip(got, want_shards, strict=True)):
                fail(code, observed=f"world {world}: shard sizes {sizes} that match {cause.split(':')[0]}",
                     expected=f"{world} contiguous pieces of {want} elements of the zero-padded flat vector",
                     cause=cause, where=where)
        if len(set(sizes)) > 1:
            fail("unequal-shards", observed=f"world {world}, {flat.numel()} elements: shard sizes {sizes}",
                 expected=f"{world} shards of {want} elements each (the last one ends with zero padding)",
                 cause="torch.chunk or tensor_split on an unpadded vector: collectives (all_gather, reduce_scatter) "
                 "need equal pieces on every rank", where=f"{where}: pad the flat vector to a multiple of world")
        rank = next(r for r, s in enumerate(got) if not close_values(s, _shard(flat, r, world), dtype=False))
        fail("wrong-shard", observed=f"world {world}: rank {rank}'s shard starts {got[rank][:4].tolist()}",
             expected=f"{_shard(flat, rank, world)[:4].tolist()} (elements {rank * want} to {(rank + 1) * want - 1} "
             "of the padded flat vector)", cause="another order of the parameters, or the padding placed first",
             where=where)
    return f"contiguous, equal, zero-padded shards for world sizes {_WORLDS} ({flat.numel()} elements)"


_SHARD_STARTER = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def shard_flat(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:\n"
    "    raise NotImplementedError\n"
)
_SHARD_SOLUTION = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def shard_flat(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:\n"
    "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
    "    flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
    "    size = flat.numel() // world\n"
    "    return flat[rank * size:(rank + 1) * size].clone()\n"
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
        starter=_SHARD_STARTER,
        solution=_SHARD_SOLUTION,
        hints=("Collectives such as all_gather need the same number of elements on every rank.",
               "flat = torch.cat of p.reshape(-1); pad with (-n) % world zeros; size = len // world; "
               "return flat[rank * size:(rank + 1) * size]."),
        probe=_probe_shard_flat,
        judge=_judge_shard_flat,
        wrong_answers=(
            (_SHARD_STARTER.replace("    raise NotImplementedError\n",
                                    "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
                                    "    return torch.tensor_split(flat, world)[rank]\n"), "unequal-shards"),
            (_SHARD_STARTER.replace("    raise NotImplementedError\n",
                                    "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
                                    "    flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
                                    "    return flat[rank::world]\n"), "strided-shard"),
            (_SHARD_STARTER.replace("    raise NotImplementedError\n",
                                    "    pieces = []\n    for p in params:\n        flat = p.detach().reshape(-1)\n"
                                    "        flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
                                    "        pieces.append(flat.chunk(world)[rank])\n"
                                    "    return torch.cat(pieces)\n"), "per-parameter-shard"),
        ),
    )
)


# --- gather the full parameters --------------------------------------------------------------------------------

def _probe_gather_full_params(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> list:
        params = _params(case)
        shard = _shard(_flat_detached(params), rank, 2).clone()
        return _rank_lists(answer["gather_params"](shard, [tuple(p.shape) for p in params]))

    return {"ranks": run_on_two_ranks(work)}


def _unflatten(flat: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    pieces, offset = [], 0
    for shape in shapes:
        n = torch.Size(shape).numel()
        pieces.append(flat[offset:offset + n].reshape(shape))
        offset += n
    return pieces


def _judge_gather_full_params(seen: dict, *, case: Case) -> str:
    params = _params(case)
    shapes = [tuple(p.shape) for p in params]
    want = [p.detach() for p in params]
    ranks = seen.get("ranks")
    if not (isinstance(ranks, list) and len(ranks) == 2):
        raise WireError("malformed observation: not one result per rank")
    shards = [_shard(_flat_detached(params), rank, 2) for rank in (0, 1)]
    for rank, got in enumerate(ranks):
        where = f"gather_params on rank {rank}"
        if not (isinstance(got, list) and len(got) == len(shapes)):
            fail("wrong-format", observed=f"rank {rank} returned {describe(got)}",
                 expected=f"a list of {len(shapes)} tensors of shapes {shapes}",
                 cause="the gathered vector was not cut back into the parameters", where=where)
        try:
            tensors = [torch.tensor(values, dtype=torch.float32) for values in got]
        except (TypeError, ValueError, RuntimeError):
            raise WireError("malformed observation: a rank's result is not numbers") from None
        if [tuple(t.shape) for t in tensors] != shapes:
            fail("wrong-shape", observed=f"rank {rank} returned shapes {[tuple(t.shape) for t in tensors]}",
                 expected=f"{shapes}", cause="the padding was kept, or the pieces were cut at the wrong offsets",
                 where=f"{where}: drop the padding (keep the first sum of numels) and reshape each piece")
        if all(close_values(g, w) for g, w in zip(tensors, want, strict=True)):
            continue
        for source in (0, 1):
            if all(close_values(g, w) for g, w in zip(tensors, _unflatten(torch.cat([shards[source]] * 2), shapes),
                                                      strict=True)):
                fail("aliased-buffers", observed=f"rank {rank} rebuilt the parameters from rank {source}'s shard twice",
                     expected="rank 0's shard, then rank 1's", cause="the output list holds one tensor twice "
                     "([torch.empty_like(shard)] * world): all_gather writes every rank's shard into it, and the "
                     "last write wins", where=f"{where}: one new tensor per rank, in a list comprehension")
        strided = torch.stack(shards, dim=1).reshape(-1)
        if all(close_values(g, w) for g, w in zip(tensors, _unflatten(strided, shapes), strict=True)):
            fail("strided-order", observed=f"rank {rank} interleaved the shards element by element",
                 expected="the shards one after the other: rank 0's piece, then rank 1's",
                 cause="each shard is a contiguous piece of the flat vector, not every world-th element",
                 where=f"{where}: torch.cat(gathered)")
        worst = max(max_difference(g, w) for g, w in zip(tensors, want, strict=True))
        fail("wrong-value", observed=f"rank {rank}'s parameters differ from the full ones by up to {worst:.3g}",
             expected="the full parameters on every rank", cause="the gathered pieces are in another order, or "
             "the cut offsets are off", where=where)
    return "every rank rebuilds the full parameters from the two shards, padding dropped"


_GATHER_STARTER = (
    "import torch\nimport torch.distributed as dist\n\n\n"
    "def gather_params(shard: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:\n"
    "    raise NotImplementedError\n"
)
_GATHER_SOLUTION = _GATHER_STARTER.replace(
    "    raise NotImplementedError\n",
    "    gathered = [torch.empty_like(shard) for _ in range(dist.get_world_size())]\n"
    "    dist.all_gather(gathered, shard)\n"
    "    flat = torch.cat(gathered)\n"
    "    params, offset = [], 0\n"
    "    for shape in shapes:\n"
    "        n = torch.Size(shape).numel()\n"
    "        params.append(flat[offset:offset + n].reshape(shape))\n"
    "        offset += n\n"
    "    return params\n")

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
        starter=_GATHER_STARTER,
        solution=_GATHER_SOLUTION,
        hints=("all_gather fills a list of world tensors, one per rank, in rank order.",
               "torch.cat the gathered list, then cut sum-of-numels pieces at running offsets and reshape; the "
               "padding is what is left over."),
        probe=_probe_gather_full_params,
        judge=_judge_gather_full_params,
        wrong_answers=(
            (_GATHER_SOLUTION.replace("[torch.empty_like(shard) for _ in range(dist.get_world_size())]",
                                      "[torch.empty_like(shard)] * dist.get_world_size()"), "aliased-buffers"),
            (_GATHER_SOLUTION.replace("torch.cat(gathered)", "torch.stack(gathered, dim=1).reshape(-1)"),
             "strided-order"),
        ),
    )
)


# --- a ZeRO-1 step ---------------------------------------------------------------------------------------------

_LR, _BETA, _STEPS = 0.1, 0.9, 3


def _zero_grads(case: Case, step: int, rank: int) -> list[torch.Tensor]:
    """Rank `rank`'s local gradients at `step` (the ranks' gradients differ, as their batches do)."""
    gen = torch.Generator().manual_seed(case.seeded(100 + 10 * step + rank))
    return [torch.randn(shape, generator=gen) for shape in _param_shapes(case)]


def _probe_zero1(answer: dict, *, case: Case) -> dict:
    def work(rank: int) -> dict:
        params = _params(case)
        shard_size = _padded(_flat_detached(params), 2).numel() // 2
        momentum = torch.zeros(shard_size)
        trace = []
        for step in range(_STEPS):
            for p, g in zip(params, _zero_grads(case, step, rank), strict=True):
                p.grad = g
            answer["zero1_step"](params, momentum, _LR, _BETA)
            trace.append(_flat_detached(params).tolist())
        return {"params": trace, "momentum": momentum.tolist()}

    return {"ranks": run_on_two_ranks(work)}


def _zero1_reference(case: Case, mode: str) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """Each rank's flat parameters after every step, and its momentum shard at the end, for an update `mode`:
    "mean" (the reference), "sum" (gradients summed, not averaged), "local" (no reduction), "no-momentum" (a
    momentum buffer that never keeps its value), "no-gather" (each rank keeps only its own shard updated)."""
    flat0 = _flat_detached(_params(case))
    n = flat0.numel()
    size = _padded(flat0, 2).numel() // 2
    views = [_padded(flat0, 2) for _ in (0, 1)]  # what each rank holds
    momenta = [torch.zeros(size) for _ in (0, 1)]
    traces: list[list[torch.Tensor]] = [[], []]
    for step in range(_STEPS):
        local = [_padded(_flat_detached(_zero_grads(case, step, rank)), 2) for rank in (0, 1)]
        total = local[0] + local[1]
        updated = []
        for rank in (0, 1):
            grad = {"sum": total, "local": local[rank]}.get(mode, total / 2)[rank * size:(rank + 1) * size]
            momenta[rank] = (0 if mode == "no-momentum" else _BETA) * momenta[rank] + grad
            updated.append(views[rank][rank * size:(rank + 1) * size] - _LR * momenta[rank])
        for rank in (0, 1):
            if mode == "no-gather":
                views[rank][rank * size:(rank + 1) * size] = updated[rank]
            else:
                views[rank] = torch.cat(updated)
            traces[rank].append(views[rank][:n].clone())
    if mode == "no-momentum":
        momenta = [torch.zeros(size), torch.zeros(size)]
    return traces, momenta


def _judge_zero1(seen: dict, *, case: Case) -> str:
    ranks = seen.get("ranks")
    if not (isinstance(ranks, list) and len(ranks) == 2 and all(
            isinstance(r, dict) and isinstance(r.get("params"), list) and len(r["params"]) == _STEPS
            and isinstance(r.get("momentum"), list) for r in ranks)):
        raise WireError("malformed observation: not each rank's parameters after every step")
    try:
        got = [[torch.tensor(step, dtype=torch.float32) for step in r["params"]] for r in ranks]
        momenta = [torch.tensor(r["momentum"], dtype=torch.float32) for r in ranks]
    except (TypeError, ValueError, RuntimeError):
        raise WireError("malformed observation: parameters are not numbers") from None
    want, want_momenta = _zero1_reference(case, "mean")
    where = "zero1_step"

    def matches(traces: list[list[torch.Tensor]]) -> bool:
        return all(close_values(g, w, rtol=1e-5, atol=1e-6) for rank in (0, 1)
                   for g, w in zip(got[rank], traces[rank], strict=True))

    if matches(want):
        if not all(close_values(m, w, rtol=1e-5, atol=1e-6) for m, w in zip(momenta, want_momenta, strict=True)):
            fail("wrong-momentum-shard", observed=f"rank 0's momentum shard starts {momenta[0][:3].tolist()}",
                 expected=f"{want_momenta[0][:3].tolist()}: this rank's piece of the momentum of the averaged "
                 "gradients", cause="the buffer you were given was not updated in place", where=where)
        return (f"{_STEPS} ZeRO-1 steps: averaged gradients, each rank's momentum shard updated in place, the "
                "updated shards all-gathered into identical parameters")
    variants = (
        ("missing-all-gather", "no-gather", "each rank updated its own shard and never received the other's: "
         "the ranks' parameters drift apart", "all_gather the updated shards and copy them into every parameter"),
        ("summed-gradient", "sum", "the gradients were summed across ranks but not divided by the world size: "
         "every step is world times too large", "all_reduce (SUM), then divide by dist.get_world_size()"),
        ("local-gradient", "local", "each rank updated its shard with its own local gradient: the other ranks' "
         "batches never count", "all_reduce the flat gradient (average) before taking your shard"),
        ("momentum-not-in-place", "no-momentum", "the momentum buffer never keeps its value between steps "
         "(`momentum = beta * momentum + g` makes a new tensor; the caller's buffer stays zero)",
         "momentum.mul_(beta).add_(grad_shard)"),
    )
    for code, mode, cause, fix in variants:
        if matches(_zero1_reference(case, mode)[0]):
            fail(code, observed=f"after {_STEPS} steps the parameters are those of {cause.split(':')[0]}",
                 expected="the parameters of SGD with momentum on the averaged gradients, the same on every rank",
                 cause=cause, where=f"{where}: {fix}")
    if not close_values(got[0][-1], got[1][-1], rtol=1e-6, atol=1e-7):
        fail("ranks-disagree", observed=f"the ranks' parameters differ by up to "
             f"{max_difference(got[0][-1], got[1][-1]):.3g} after {_STEPS} steps",
             expected="identical parameters on every rank", cause="the updated shards were not all-gathered, or "
             "were written back at the wrong offsets", where=where)
    step = next(s for s in range(_STEPS) if not close_values(got[0][s], want[0][s], rtol=1e-5, atol=1e-6))
    fail("wrong-update", observed=f"after step {step + 1} the parameters differ from the reference by up to "
         f"{max_difference(got[0][step], want[0][step]):.3g}",
         expected="p -= lr * m, with m = beta * m + (mean gradient) on this rank's shard",
         cause="another update rule (the momentum added after the step, lr applied to the gradient before the "
         "momentum), or the shard taken at the wrong offset", where=where)


_ZERO1_STARTER = (
    "import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n\n\n"
    "def zero1_step(params, momentum, lr, beta):\n"
    "    raise NotImplementedError\n"
)
_ZERO1_SOLUTION = _ZERO1_STARTER.replace(
    "    raise NotImplementedError\n",
    "    world, rank = dist.get_world_size(), dist.get_rank()\n"
    "    grad = torch.cat([p.grad.reshape(-1) for p in params])\n"
    "    dist.all_reduce(grad)\n"
    "    grad /= world\n"
    "    pad = (-grad.numel()) % world\n"
    "    size = (grad.numel() + pad) // world\n"
    "    mine = slice(rank * size, (rank + 1) * size)\n"
    "    with torch.no_grad():\n"
    "        flat = F.pad(torch.cat([p.reshape(-1) for p in params]), (0, pad))\n"
    "        momentum.mul_(beta).add_(F.pad(grad, (0, pad))[mine])\n"
    "        shard = flat[mine] - lr * momentum\n"
    "        gathered = [torch.empty_like(shard) for _ in range(world)]\n"
    "        dist.all_gather(gathered, shard)\n"
    "        flat = torch.cat(gathered)\n"
    "        offset = 0\n"
    "        for p in params:\n"
    "            p.copy_(flat[offset:offset + p.numel()].view_as(p))\n"
    "            offset += p.numel()\n")

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
        starter=_ZERO1_STARTER,
        solution=_ZERO1_SOLUTION,
        hints=("Three collectives' worth of thinking: what must every rank agree on before the update (the "
               "gradient), what does each rank change alone (its shard), what must every rank receive after?",
               "all_reduce the flat gradient and divide by the world size; update momentum and your shard in place "
               "(mul_, add_); all_gather the updated shards, torch.cat them and copy_ the pieces into the "
               "parameters under no_grad."),
        probe=_probe_zero1,
        judge=_judge_zero1,
        wrong_answers=(
            (_ZERO1_SOLUTION.replace("        gathered = [torch.empty_like(shard) for _ in range(world)]\n"
                                     "        dist.all_gather(gathered, shard)\n"
                                     "        flat = torch.cat(gathered)\n",
                                     "        flat[mine] = shard\n"), "missing-all-gather"),
            (_ZERO1_SOLUTION.replace("    grad /= world\n", ""), "summed-gradient"),
            (_ZERO1_SOLUTION.replace("    dist.all_reduce(grad)\n    grad /= world\n", ""), "local-gradient"),
            (_ZERO1_SOLUTION.replace("        momentum.mul_(beta).add_(F.pad(grad, (0, pad))[mine])\n",
                                     "        momentum = beta * momentum + F.pad(grad, (0, pad))[mine]\n"),
             "momentum-not-in-place"),
        ),
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
    multiple_choice(
        id="ddp-fsdp-what-each-rank-holds",
        title="What an FSDP rank holds between steps",
        topics=("ddp", "memory"),
        difficulty=2,
        question="A model is wrapped with FSDP (full sharding) on 2 ranks. Between two steps, what does each rank "
        "hold of a layer's weight, and what does backward leave in that weight's .grad?",
        options=(
            ("half of the weight; backward reduce-scatters, leaving half of the averaged gradient",
             "each rank owns one shard; the full weight is all-gathered only around the layer's forward and "
             "backward, and the reduce-scatter leaves each rank the average of its own shard's gradient"),
            ("the whole weight; backward all-reduces, leaving the whole averaged gradient",
             "that is DDP (or ZeRO-1, which shards only the optimizer state): FSDP shards the parameters too"),
            ("half of the weight; backward all-reduces, leaving the whole averaged gradient",
             "a full gradient on every rank would cost the memory FSDP saves: the gradients are reduce-scattered, "
             "each rank keeping its shard"),
            ("half of the weight; forward sends activations to the rank with the other half",
             "that is tensor (or pipeline) parallelism: under FSDP every rank runs the whole layer on its own "
             "batch, with the weight gathered for it"),
        ),
        key="a",
        hints=("FSDP saves memory on parameters, gradients and optimizer state alike. Which collective leaves each "
               "rank only its piece of a sum?",
               "all_gather before use, reduce_scatter of the gradients after backward."),
        experiment=_fsdp_experiment,
    )
)
