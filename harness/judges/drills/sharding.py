"""The judge side of the sharding drills (`harness.drills.bank.sharding`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch

from harness.contract.case import Case
from harness.contract.compare import close_values, malformed, max_difference
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.sharding import (
    GATHER_STARTER,
    SHARD_STARTER,
    SHARD_WORLDS,
    ZERO1_BETA,
    ZERO1_LR,
    ZERO1_STARTER,
    ZERO1_STEPS,
    case_params,
    flat_detached,
    padded_flat,
    rank_shard,
    zero_grads,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _strided(flat: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return padded_flat(flat, world)[rank::world]


def _per_parameter(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:
    return torch.cat([rank_shard(p.detach().reshape(-1), rank, world) for p in params])


def _judge_shard_flat(seen: dict, *, case: Case) -> str:
    params = case_params(case)
    flat = flat_detached(params)
    shards = seen.get("shards")
    if not (isinstance(shards, list) and len(shards) == len(SHARD_WORLDS)
            and all(isinstance(s, list) and len(s) == w for s, w in zip(shards, SHARD_WORLDS, strict=True))):
        malformed("not one shard per rank and world size")
    for world, got in zip(SHARD_WORLDS, shards, strict=True):
        where = f"shard_flat(params, rank, world={world})"
        for rank, shard in enumerate(got):
            if not isinstance(shard, torch.Tensor) or shard.dim() != 1:
                fail("not-flat", observed=f"rank {rank} of {world} got {describe(shard)}", expected="a 1-D tensor",
                     cause="the parameters were not flattened and concatenated into one vector", where=where)
        if all(close_values(s, rank_shard(flat, r, world), dtype=False) for r, s in enumerate(got)):
            continue
        sizes = [s.numel() for s in got]
        want = padded_flat(flat, world).numel() // world
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
        rank = next(r for r, s in enumerate(got) if not close_values(s, rank_shard(flat, r, world), dtype=False))
        fail("wrong-shard", observed=f"world {world}: rank {rank}'s shard starts {got[rank][:4].tolist()}",
             expected=f"{rank_shard(flat, rank, world)[:4].tolist()} (elements {rank * want} to "
             f"{(rank + 1) * want - 1} "
             "of the padded flat vector)", cause="another order of the parameters, or the padding placed first",
             where=where)
    return f"contiguous, equal, zero-padded shards for world sizes {SHARD_WORLDS} ({flat.numel()} elements)"


_SHARD_SOLUTION = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def shard_flat(params: list[torch.Tensor], rank: int, world: int) -> torch.Tensor:\n"
    "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
    "    flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
    "    size = flat.numel() // world\n"
    "    return flat[rank * size:(rank + 1) * size].clone()\n"
)


def _unflatten(flat: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    pieces, offset = [], 0
    for shape in shapes:
        n = torch.Size(shape).numel()
        pieces.append(flat[offset:offset + n].reshape(shape))
        offset += n
    return pieces


def _judge_gather_full_params(seen: dict, *, case: Case) -> str:
    params = case_params(case)
    shapes = [tuple(p.shape) for p in params]
    want = [p.detach() for p in params]
    ranks = seen.get("ranks")
    if not (isinstance(ranks, list) and len(ranks) == 2):
        malformed("not one result per rank")
    shards = [rank_shard(flat_detached(params), rank, 2) for rank in (0, 1)]
    for rank, got in enumerate(ranks):
        where = f"gather_params on rank {rank}"
        if not (isinstance(got, list) and len(got) == len(shapes)):
            fail("wrong-format", observed=f"rank {rank} returned {describe(got)}",
                 expected=f"a list of {len(shapes)} tensors of shapes {shapes}",
                 cause="the gathered vector was not cut back into the parameters", where=where)
        try:
            tensors = [torch.tensor(values, dtype=torch.float32) for values in got]
        except (TypeError, ValueError, RuntimeError):
            malformed("a rank's result is not numbers")
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
        size, flat = shards[0].numel(), torch.cat([t.reshape(-1) for t in tensors])
        own, other = (flat[r * size:(r + 1) * size] for r in (rank, 1 - rank))
        if close_values(own, shards[rank][:own.numel()]) and not any(
                close_values(other, shard[:other.numel()]) for shard in shards):
            contents = "zeros" if not other.any() else "values that are in no rank's shard"
            fail("unfilled-buffer", observed=f"rank {rank} returned its own shard in place, but rank "
                 f"{1 - rank}'s piece holds {contents}", expected="every rank's shard, filled in by all_gather",
                 cause=f"the slot for rank {1 - rank} was never written: a buffer made with torch.empty or "
                 "torch.zeros keeps what it held until a collective fills it", where=f"{where}: the all_gather "
                 "call and the list it fills")
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


_GATHER_SOLUTION = edited(GATHER_STARTER,
                          ("    raise NotImplementedError\n",
                           "    gathered = [torch.empty_like(shard) for _ in range(dist.get_world_size())]\n"
                           "    dist.all_gather(gathered, shard)\n"
                           "    flat = torch.cat(gathered)\n"
                           "    params, offset = [], 0\n"
                           "    for shape in shapes:\n"
                           "        n = torch.Size(shape).numel()\n"
                           "        params.append(flat[offset:offset + n].reshape(shape))\n"
                           "        offset += n\n"
                           "    return params\n"))


def _zero1_reference(case: Case, mode: str) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """Each rank's flat parameters after every step, and its momentum shard at the end, for an update `mode`:
    "mean" (the reference), "sum" (gradients summed, not averaged), "local" (no reduction), "no-momentum" (a
    momentum buffer that never keeps its value), "no-gather" (each rank keeps only its own shard updated)."""
    flat0 = flat_detached(case_params(case))
    n = flat0.numel()
    size = padded_flat(flat0, 2).numel() // 2
    views = [padded_flat(flat0, 2) for _ in (0, 1)]  # what each rank holds
    momenta = [torch.zeros(size) for _ in (0, 1)]
    traces: list[list[torch.Tensor]] = [[], []]
    for step in range(ZERO1_STEPS):
        local = [padded_flat(flat_detached(zero_grads(case, step, rank)), 2) for rank in (0, 1)]
        total = local[0] + local[1]
        updated = []
        for rank in (0, 1):
            grad = {"sum": total, "local": local[rank]}.get(mode, total / 2)[rank * size:(rank + 1) * size]
            momenta[rank] = (0 if mode == "no-momentum" else ZERO1_BETA) * momenta[rank] + grad
            updated.append(views[rank][rank * size:(rank + 1) * size] - ZERO1_LR * momenta[rank])
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
            isinstance(r, dict) and isinstance(r.get("params"), list) and len(r["params"]) == ZERO1_STEPS
            and isinstance(r.get("momentum"), list) for r in ranks)):
        malformed("not each rank's parameters after every step")
    try:
        got = [[torch.tensor(step, dtype=torch.float32) for step in r["params"]] for r in ranks]
        momenta = [torch.tensor(r["momentum"], dtype=torch.float32) for r in ranks]
    except (TypeError, ValueError, RuntimeError):
        malformed("parameters are not numbers")
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
        return (f"{ZERO1_STEPS} ZeRO-1 steps: averaged gradients, each rank's momentum shard updated in place, the "
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
            fail(code, observed=f"after {ZERO1_STEPS} steps the parameters are those of {cause.split(':')[0]}",
                 expected="the parameters of SGD with momentum on the averaged gradients, the same on every rank",
                 cause=cause, where=f"{where}: {fix}")
    if not close_values(got[0][-1], got[1][-1], rtol=1e-6, atol=1e-7):
        fail("ranks-disagree", observed=f"the ranks' parameters differ by up to "
             f"{max_difference(got[0][-1], got[1][-1]):.3g} after {ZERO1_STEPS} steps",
             expected="identical parameters on every rank", cause="the updated shards were not all-gathered, or "
             "were written back at the wrong offsets", where=where)
    step = next(s for s in range(ZERO1_STEPS) if not close_values(got[0][s], want[0][s], rtol=1e-5, atol=1e-6))
    fail("wrong-update", observed=f"after step {step + 1} the parameters differ from the reference by up to "
         f"{max_difference(got[0][step], want[0][step]):.3g}",
         expected="p -= lr * m, with m = beta * m + (mean gradient) on this rank's shard",
         cause="another update rule (the momentum added after the step, lr applied to the gradient before the "
         "momentum), or the shard taken at the wrong offset", where=where)


_ZERO1_SOLUTION = edited(ZERO1_STARTER,
                         ("    raise NotImplementedError\n",
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
                          "            offset += p.numel()\n"))


add_answers(
    Answers(
        drill_id="ddp-shard-flat",
        solution=_SHARD_SOLUTION,
        wrong_answers=(
            (edited(SHARD_STARTER,
                    ("    raise NotImplementedError\n",
                     "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
                     "    return torch.tensor_split(flat, world)[rank]\n")), "unequal-shards"),
            (edited(SHARD_STARTER,
                    ("    raise NotImplementedError\n",
                     "    flat = torch.cat([p.detach().reshape(-1) for p in params])\n"
                     "    flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
                     "    return flat[rank::world]\n")), "strided-shard"),
            (edited(SHARD_STARTER,
                    ("    raise NotImplementedError\n",
                     "    pieces = []\n    for p in params:\n        flat = p.detach().reshape(-1)\n"
                     "        flat = F.pad(flat, (0, (-flat.numel()) % world))\n"
                     "        pieces.append(flat.chunk(world)[rank])\n"
                     "    return torch.cat(pieces)\n")), "per-parameter-shard"),
        ),
        judge=_judge_shard_flat,
    )
)


add_answers(
    Answers(
        drill_id="ddp-gather-full-params",
        solution=_GATHER_SOLUTION,
        wrong_answers=(
            (edited(_GATHER_SOLUTION,
                    ("[torch.empty_like(shard) for _ in range(dist.get_world_size())]",
                     "[torch.empty_like(shard)] * dist.get_world_size()")), "aliased-buffers"),
            (edited(_GATHER_SOLUTION,
                    ("    dist.all_gather(gathered, shard)\n",
                     "    gathered[dist.get_rank()] = shard\n")), "unfilled-buffer"),
            (edited(_GATHER_SOLUTION,
                    ("torch.cat(gathered)", "torch.stack(gathered, dim=1).reshape(-1)")),
             "strided-order"),
        ),
        judge=_judge_gather_full_params,
    )
)


add_answers(
    Answers(
        drill_id="ddp-zero1-step",
        solution=_ZERO1_SOLUTION,
        wrong_answers=(
            (edited(_ZERO1_SOLUTION,
                    ("        gathered = [torch.empty_like(shard) for _ in range(world)]\n"
                     "        dist.all_gather(gathered, shard)\n"
                     "        flat = torch.cat(gathered)\n",
                     "        flat[mine] = shard\n")), "missing-all-gather"),
            (edited(_ZERO1_SOLUTION, ("    grad /= world\n", "")), "summed-gradient"),
            (edited(_ZERO1_SOLUTION, ("    dist.all_reduce(grad)\n    grad /= world\n", "")), "local-gradient"),
            (edited(_ZERO1_SOLUTION,
                    ("        momentum.mul_(beta).add_(F.pad(grad, (0, pad))[mine])\n",
                     "        momentum = beta * momentum + F.pad(grad, (0, pad))[mine]\n")),
             "momentum-not-in-place"),
        ),
        judge=_judge_zero1,
    )
)


add_answers(
    choice_answers(
        "ddp-fsdp-what-each-rank-holds",
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
    )
)
