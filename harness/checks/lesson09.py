"""Checks of lesson 09 (DDP): each runs the student's code on real gloo process groups of forked ranks.

The ranks are forked (`harness.launch.launch_forked`): no interpreter starts, so a check costs well under
a second. What is compared, and the tolerance: plain SGD (no momentum, no weight decay) in float32 on a
tiny MLP; DDP on 2 ranks with per-rank batch B against one process with batch 2B on the same samples in
the same order. The two differ only in the order float32 additions happen (DDP sums the two ranks'
gradients, one process sums all 2B samples at once), so parameters agree to about 1e-6: the checks
allow 1e-4 (absolute and relative).
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset

from harness.checks.core import fail, register
from harness.launch import LaunchError, launch_forked

WORLD = 2
LAUNCH_TIMEOUT_S = 30  # per attempt: generous for a loaded grading machine, far beyond a correct run
TOLERANCE = 1e-4
MODEL_SEED = 1234


# ----------------------------------------------------------------------------------------------------
# Shared pieces


def make_model() -> nn.Module:
    """The checks' tiny regression MLP, initialised identically on every call (seeded)."""
    generator_state = torch.get_rng_state()
    torch.manual_seed(MODEL_SEED)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    torch.set_rng_state(generator_state)
    return model


def regression_data(n: int, seed: int) -> TensorDataset:
    """n samples of a noisy linear target: X (n, 4), y (n, 1)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class IndexRecorder(Dataset):
    """Wraps a dataset and records the index of every sample loaded (in this process)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        self.seen.append(int(index))
        return self.dataset[index]


@functools.cache
def _warm_up_parent() -> None:
    """Take one optimizer step here, before forking: its first call imports seconds' worth of modules,
    which forked ranks then inherit instead of each importing them again."""
    parameter = nn.Parameter(torch.zeros(1))
    parameter.grad = torch.zeros(1)
    torch.optim.SGD([parameter], lr=0.1).step()


def _run_ranks(worker: Callable[..., Any], *args: Any) -> list[Any]:
    """Run worker on WORLD forked gloo ranks; a rank's exception becomes the student's exception."""
    _warm_up_parent()
    try:
        return launch_forked(worker, WORLD, args=args, timeout_s=LAUNCH_TIMEOUT_S).results
    except LaunchError as error:
        if "did not finish" not in str(error):
            _report_launch_error(error)
    # A forked child of a multi-threaded kernel can, rarely, deadlock before it runs anything (a lock held by
    # another thread at fork time): a second attempt tells that apart from a student's real hang.
    try:
        return launch_forked(worker, WORLD, args=args, timeout_s=LAUNCH_TIMEOUT_S).results
    except LaunchError as error:
        _report_launch_error(error)


def _report_launch_error(error: LaunchError) -> NoReturn:
    """Turn a failed launch into the student's failure: a hang, or the exception a rank raised."""
    last = str(error).strip().splitlines()[-1]
    if "did not finish" in str(error):
        fail("hang", observed=f"the ranks did not finish within {LAUNCH_TIMEOUT_S} s, twice",
             expected="every rank returns", cause="one rank waits in a collective (all_reduce, barrier) "
             "that another rank never calls, e.g. a collective inside `if rank == 0:`",
             where="collectives and barriers: every rank must call them, in the same order")
    raise RuntimeError(f"on rank {error.rank}: {last}") from None


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(a[k].float(), b[k].float(), atol=TOLERANCE, rtol=TOLERANCE) for k in b)


# ----------------------------------------------------------------------------------------------------
# 09-ddp-mean


def _mean_worker(ddp_mean: Callable[[torch.Tensor], torch.Tensor], values: list[torch.Tensor]) -> dict[str, Any]:
    mine = values[dist.get_rank()].clone()
    out = ddp_mean(mine)
    return {"out": out.detach().clone() if isinstance(out, torch.Tensor) else out, "input_after": mine}


@register(
    "09-ddp-mean",
    hints=(
        "Every rank holds its own value; an all_reduce with SUM leaves the sum on every rank. What do you divide it by?",
        "total = value.detach().clone(); dist.all_reduce(total, op=dist.ReduceOp.SUM); return total / dist.get_world_size()",
    ),
)
def check_ddp_mean(ddp_mean: Callable[[torch.Tensor], torch.Tensor], *, hidden: bool) -> str:
    """Run ddp_mean on 2 ranks holding different values; every rank must get the mean, inputs unchanged."""
    cases = [torch.tensor(1.5), torch.tensor([0.25, -2.0, 4.0], dtype=torch.float64)] if hidden else [torch.tensor(3.0)]
    for base in cases:
        values = [base + 1.0, base * -2.0]
        expected = (values[0] + values[1]) / 2
        results = _run_ranks(_mean_worker, ddp_mean, values)
        for rank, result in enumerate(results):
            out = result["out"]
            if not isinstance(out, torch.Tensor):
                fail("not-a-tensor", observed=f"rank {rank} got a {type(out).__name__}", expected="a tensor",
                     cause="the function returns something else (a float from .item()?)",
                     where="the return statement of ddp_mean")
            if torch.allclose(out.to(expected.dtype), values[rank]) and not torch.allclose(values[rank], expected):
                fail("not-averaged", observed=f"rank {rank} got its own value {values[rank].tolist()}",
                     expected=f"the mean over ranks, {expected.tolist()}, on every rank",
                     cause="the value is returned without communicating: no all_reduce, so each rank reports "
                     "only its own shard's metric", where="ddp_mean: all_reduce a copy, then divide")
            if torch.allclose(out.to(expected.dtype), values[0] + values[1]):
                fail("summed", observed=f"rank {rank} got the sum {out.tolist()}",
                     expected=f"the mean {expected.tolist()}", cause="all_reduce(SUM) without dividing by the world size",
                     where="divide by dist.get_world_size() after the all_reduce")
            if not torch.allclose(out.to(expected.dtype), expected):
                fail("wrong-mean", observed=f"rank {rank} got {out.tolist()}", expected=f"{expected.tolist()}",
                     cause="the reduction or the division is not the mean over ranks", where="ddp_mean")
            if not torch.equal(result["input_after"], values[rank]):
                fail("modified-input", observed=f"rank {rank}'s input became {result['input_after'].tolist()}",
                     expected=f"the input left as {values[rank].tolist()}",
                     cause="dist.all_reduce works in place: reducing the caller's tensor overwrites their metric",
                     where="all_reduce a clone: total = value.detach().clone()")
    return "every rank gets the mean over ranks; inputs are left unchanged"


# ----------------------------------------------------------------------------------------------------
# 09-shard-loader


def _loader_indices(loader: DataLoader, epoch: int) -> list[list[int]]:
    set_epoch = getattr(loader.sampler, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    elif epoch > 0:
        fail("same-order-every-epoch", observed=f"the loader's sampler ({type(loader.sampler).__name__}) has no set_epoch",
             expected="a sampler whose set_epoch(epoch) reshuffles", cause="not a DistributedSampler",
             where="DataLoader(dataset, batch_size=..., sampler=DistributedSampler(...))")
    return [batch[0].tolist() for batch in loader]


@register(
    "09-shard-loader",
    hints=(
        "A DistributedSampler gives each rank its own shard; the DataLoader then batches that shard. "
        "Pass the sampler, not shuffle=True, to the DataLoader.",
        "sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed); "
        "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
    ),
)
def check_shard_loader(make_ddp_loader: Callable[..., DataLoader], *, hidden: bool) -> str:
    """Build the loader of every rank of a world; shards must be disjoint, cover, be seeded and reshuffle."""
    settings = [(40, 4, 2, 0), (37, 3, 3, 5), (64, 8, 4, 11)] if hidden else [(40, 4, 2, 0)]
    for n, batch_size, world, seed in settings:
        dataset = TensorDataset(torch.arange(n))
        loaders = [make_ddp_loader(dataset, batch_size, rank=r, world_size=world, seed=seed) for r in range(world)]
        epochs = [[_loader_indices(loader, epoch=0) for loader in loaders]]
        shards = [sum(batches, []) for batches in epochs[0]]
        sizes = [len(batch) for batch in epochs[0][0]]
        if sizes and sizes[0] != batch_size:
            fail("wrong-batch-size", observed=f"batches of {sizes[0]} samples on a rank", expected=f"{batch_size} (per rank)",
                 cause="batch_size is the per-rank batch: do not divide or multiply it by the world size",
                 where="the DataLoader's batch_size")
        covered = set().union(*map(set, shards))
        if any(len(shard) > -(-n // world) for shard in shards) or len(covered) < world * (n // world):
            fail("overlapping-shards", observed=f"{world} ranks loaded {[len(s) for s in shards]} samples, "
                 f"{len(covered)} distinct of {n}",
                 expected=f"each rank about {n // world} samples, together all {n}",
                 cause="every rank reads the whole dataset (shuffle=True or a RandomSampler instead of a "
                 "DistributedSampler), or the ranks shuffle with different seeds, so they train on the same samples",
                 where="pass sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank, ...) to the DataLoader")
        if shards[0] == sorted(shards[0]) and n > 8:
            fail("not-shuffled", observed=f"rank 0 reads samples in increasing order {shards[0][:6]}...",
                 expected="a shuffled order", cause="shuffle=False in the sampler", where="DistributedSampler(..., shuffle=True)")
        reseeded = sum(_loader_indices(make_ddp_loader(dataset, batch_size, rank=0, world_size=world, seed=seed + 1), epoch=0), [])
        if reseeded == shards[0]:
            fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give rank 0 the same order",
                 expected="the seed to choose the permutation", cause="the seed argument is not passed to the sampler",
                 where="DistributedSampler(..., seed=seed)")
        next_epoch = sum(_loader_indices(loaders[0], epoch=1), [])
        if next_epoch == shards[0]:
            fail("same-order-every-epoch", observed="set_epoch(1) leaves rank 0's order unchanged",
                 expected="a new permutation each epoch", cause="the sampler ignores the epoch",
                 where="use torch.utils.data.DistributedSampler, whose set_epoch reseeds the shuffle")
    return "disjoint shards covering the data, per-rank batches, seeded and reshuffled by set_epoch"


# ----------------------------------------------------------------------------------------------------
# 09-train-ddp


def _train_worker(train_ddp: Callable[..., Any], dataset: Dataset, config: dict[str, Any]) -> dict[str, Any]:
    recorder = IndexRecorder(dataset)
    state = train_ddp(make_model, recorder, nn.functional.mse_loss, **config)
    if not isinstance(state, dict):
        raise TypeError(f"train_ddp returned a {type(state).__name__}; return the unwrapped model's state_dict()")
    return {"state": {k: v.detach().clone() for k, v in state.items()}, "seen": recorder.seen}


def reference_training(dataset: TensorDataset, *, epochs: int, batch_size: int, lr: float, seed: int, world: int = WORLD) -> dict[str, torch.Tensor]:
    """One process, batch world*batch_size, the DistributedSampler's permutation of each epoch, plain SGD."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = dataset.tensors
    for epoch in range(epochs):
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed + epoch))
        for start in range(0, len(order), world * batch_size):
            rows = order[start : start + world * batch_size]
            loss = nn.functional.mse_loss(model(x[rows]), y[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@register(
    "09-train-ddp",
    hints=(
        "Four DDP ingredients: a sharded loader, the model wrapped in DDP (before the optimizer is built), "
        "sampler.set_epoch(epoch) at the start of each epoch, and the unwrapped model's state_dict at the end.",
        "sampler = DistributedSampler(dataset, seed=seed); loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler); "
        "model = DDP(make_model()); optimizer = SGD(model.parameters(), lr=lr); for epoch: sampler.set_epoch(epoch); "
        "for x, y: zero_grad, loss_fn(model(x), y).backward(), step; return model.module.state_dict()",
    ),
)
def check_train_ddp(train_ddp: Callable[..., dict[str, torch.Tensor]], *, hidden: bool) -> str:
    """Train on 2 ranks; compare with one process at twice the batch, and the ranks with each other."""
    configs = [dict(n=64, epochs=3, batch_size=8, lr=0.05, seed=0)]
    if hidden:
        configs = [dict(n=48, epochs=2, batch_size=4, lr=0.1, seed=7), dict(n=80, epochs=3, batch_size=10, lr=0.02, seed=3)]
    for config in configs:
        n = config.pop("n")
        dataset = regression_data(n, seed=config["seed"] + 100)
        results = _run_ranks(_train_worker, train_ddp, dataset, config)
        _check_sharding(results, n, config["epochs"])
        states = [result["state"] for result in results]
        wrapped = [k for k in states[0] if k.startswith("module.")]
        if wrapped:
            fail("wrapped-state-dict", observed=f"keys like {wrapped[0]!r}", expected="the plain model's keys ('0.weight', ...)",
                 cause="the state_dict of the DDP wrapper was returned: its keys carry 'module.' and will not load "
                 "into a plain model", where="return model.module.state_dict()")
        if set(states[0]) != set(make_model().state_dict()):
            fail("wrong-state-dict", observed=f"keys {sorted(states[0])}", expected=f"keys {sorted(make_model().state_dict())}",
                 cause="something other than the trained model's state_dict was returned", where="the return statement")
        if not _close(states[0], states[1]):
            fail("ranks-differ", observed=f"the ranks' parameters differ by up to {_max_difference(states[0], states[1]):.2e}",
                 expected="identical parameters on every rank",
                 cause="gradients are not averaged across ranks: the model is not wrapped in DDP (each rank trains "
                 "its own copy on its own shard), or the optimizer was built on other parameters",
                 where="model = DDP(make_model()) before building the optimizer from model.parameters()")
        reference = reference_training(dataset, world=WORLD, **config)
        if not _close(states[0], reference):
            fail("not-ddp-equivalent",
                 observed=f"parameters differ from one process with batch {WORLD * config['batch_size']} by up to "
                 f"{_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}: DDP over {WORLD} ranks of batch "
                 f"{config['batch_size']} is one process with batch {WORLD * config['batch_size']}",
                 cause="the update differs: a rescaled loss or learning rate, a missing zero_grad, a different "
                 "optimizer, or extra steps", where="the inner loop: zero_grad, loss_fn(model(x), y).backward(), step, with plain SGD(lr)")
    return f"DDP on {WORLD} ranks matches one process at twice the batch; ranks identical; set_epoch reshuffles"


def _check_sharding(results: list[dict[str, Any]], n: int, epochs: int) -> None:
    per_rank = n // WORLD
    for rank, result in enumerate(results):
        if len(result["seen"]) == 0:
            fail("no-samples-seen", observed=f"rank {rank} loaded no sample from the dataset it was given",
                 expected=f"{per_rank} samples per epoch", cause="the dataset passed in is not the one trained on, "
                 "or DataLoader workers (num_workers > 0) load it in other processes", where="the DataLoader (keep num_workers=0 here)")
    seen = [result["seen"] for result in results]
    if any(len(s) != per_rank * epochs for s in seen) or set(seen[0][:per_rank]) & set(seen[1][:per_rank]):
        fail("not-sharded", observed=f"ranks loaded {[len(s) // epochs for s in seen]} samples per epoch; "
             f"{len(set(seen[0][:per_rank]) & set(seen[1][:per_rank]))} samples seen by both in epoch 0",
             expected=f"{per_rank} samples per rank per epoch, no sample on two ranks",
             cause="the loader is not built with a DistributedSampler, so every rank reads everything",
             where="DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, seed=seed))")
    orders = [seen[0][e * per_rank : (e + 1) * per_rank] for e in range(epochs)]
    if epochs > 1 and all(order == orders[0] for order in orders):
        fail("missing-set-epoch", observed=f"rank 0 read its samples in the same order in all {epochs} epochs",
             expected="a new order each epoch", cause="the DistributedSampler's epoch is never advanced: it seeds its "
             "shuffle with seed + epoch, and without set_epoch the epoch stays 0",
             where="call loader.sampler.set_epoch(epoch) at the start of every epoch")


# ----------------------------------------------------------------------------------------------------
# 09-save-rank0


def _save_worker(save_checkpoint_ddp: Callable[..., None], rank_dirs: list[str], epoch: int) -> dict[str, Any]:
    rank = dist.get_rank()
    os.chdir(rank_dirs[rank])  # a relative path lands in this rank's own folder: who wrote is visible on disk
    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    if rank == 0:
        time.sleep(0.4)  # rank 0 arrives late: a rank that does not wait for its save returns before the file exists
    save_checkpoint_ddp(model, optimizer, epoch, "checkpoint.pt")
    return {"rank0_file_exists_on_return": (Path(rank_dirs[0]) / "checkpoint.pt").exists()}


@register(
    "09-save-rank0",
    hints=(
        "Only one process should write the file, and the others must not go on before it exists.",
        "if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), 'optimizer': optimizer.state_dict(), "
        "'epoch': epoch}, path); then dist.barrier() on every rank",
    ),
)
def check_save_rank0(save_checkpoint_ddp: Callable[..., None], *, hidden: bool) -> str:
    """Call the save on 2 ranks, each in its own folder: only rank 0's folder may get the file, before anyone returns."""
    with tempfile.TemporaryDirectory(prefix="check-09-save-") as tmp:
        rank_dirs = [os.path.join(tmp, f"rank{r}") for r in range(WORLD)]
        for folder in rank_dirs:
            os.makedirs(folder)
        epoch = 7 if hidden else 3
        results = _run_ranks(_save_worker, save_checkpoint_ddp, rank_dirs, epoch)
        written = [r for r in range(WORLD) if os.listdir(rank_dirs[r])]
        if written != [0]:
            if 0 in written:
                fail("saved-on-every-rank", observed=f"ranks {written} each wrote a checkpoint",
                     expected="only rank 0 writes", cause="the save is not guarded: every rank writes the same "
                     "file (wasted I/O, and on a shared disk a corrupt file when writes interleave)",
                     where="if dist.get_rank() == 0: torch.save(...)")
            fail("not-saved-on-rank0", observed=f"files written by ranks {written or 'none'}",
                 expected="rank 0 writes the checkpoint", cause="the guard selects the wrong rank, or nothing is saved",
                 where="if dist.get_rank() == 0: torch.save(..., path)")
        if not all(result["rank0_file_exists_on_return"] for result in results):
            fail("missing-barrier", observed="rank 1 returned before rank 0 had written the checkpoint",
                 expected="every rank returns only once the file exists",
                 cause="no barrier after the save: the other ranks race ahead (and may read a file that is not there yet)",
                 where="dist.barrier() after the guarded save, on every rank")
        checkpoint = torch.load(os.path.join(rank_dirs[0], "checkpoint.pt"), weights_only=True)
        missing = [key for key in ("model", "optimizer", "epoch") if key not in checkpoint]
        if missing:
            fail("incomplete-checkpoint", observed=f"keys {sorted(checkpoint)}", expected="'model', 'optimizer' and 'epoch'",
                 cause="a resumable checkpoint needs all three", where="the dict passed to torch.save")
        if any(key.startswith("module.") for key in checkpoint["model"]):
            fail("wrapped-state-dict", observed="model keys start with 'module.'", expected="the plain model's keys",
                 cause="the DDP wrapper's state_dict was saved: it will not load into a plain model",
                 where="save model.module.state_dict()")
        if checkpoint["epoch"] != epoch:
            fail("wrong-epoch", observed=f"epoch {checkpoint['epoch']!r}", expected=f"{epoch}",
                 cause="the epoch passed in is not the one saved", where="'epoch': epoch")
    return "rank 0 alone writes a full checkpoint with the unwrapped model; the other ranks wait for it"


# ----------------------------------------------------------------------------------------------------
# 09-no-sync


def _accumulate_worker(accumulate_step: Callable[..., None], micro: int, steps: int, seed: int) -> dict[str, Any]:
    rank = dist.get_rank()
    model = DDP(make_model())
    reductions = {"count": 0}

    def counting_allreduce(state, bucket):  # no annotations: DDP checks them, and this module's are strings
        reductions["count"] += 1
        buffer = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])

    model.register_comm_hook(None, counting_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
        batches = [(torch.randn(4, 4, generator=generator), torch.randn(4, 1, generator=generator)) for _ in range(micro)]
        accumulate_step(model, optimizer, batches, nn.functional.mse_loss)
    return {"state": {k: v.detach().clone() for k, v in model.module.state_dict().items()}, "reductions": reductions["count"]}


def _accumulation_reference(micro: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        xs, ys = [], []
        for rank in range(WORLD):
            generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
            for _ in range(micro):
                xs.append(torch.randn(4, 4, generator=generator))
                ys.append(torch.randn(4, 1, generator=generator))
        loss = nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@register(
    "09-no-sync",
    hints=(
        "DDP all-reduces gradients in every backward. Inside `with model.no_sync():` it does not; the gradients "
        "just accumulate locally. Which backward must synchronise?",
        "for i, (x, y) in enumerate(micro_batches): last = i == len(micro_batches) - 1; "
        "with (nullcontext() if last else model.no_sync()): (loss_fn(model(x), y) / len(micro_batches)).backward(); "
        "then optimizer.step(); optimizer.zero_grad(set_to_none=True)",
    ),
)
def check_no_sync(accumulate_step: Callable[..., None], *, hidden: bool) -> str:
    """Count DDP's all-reduces through a comm hook; compare the update with one process on the whole batch."""
    for micro, steps, seed in ([(3, 2, 5), (2, 3, 9)] if hidden else [(4, 2, 0)]):
        results = _run_ranks(_accumulate_worker, accumulate_step, micro, steps, seed)
        reductions = results[0]["reductions"]
        if reductions == 0:
            fail("never-synced", observed="no gradient all-reduce happened", expected=f"one per optimizer step ({steps})",
                 cause="every backward ran inside no_sync, the last one included, so the ranks never average",
                 where="run the last micro-batch's backward outside no_sync")
        if reductions > steps:
            fail("missing-no-sync", observed=f"{reductions} gradient all-reduces for {steps} optimizer steps of {micro} micro-batches",
                 expected=f"{steps}: one per optimizer step", cause="every micro-batch's backward synchronises: "
                 "communication is paid micro-batch times for the same result",
                 where="wrap all but the last micro-batch's forward and backward in `with model.no_sync():`")
        reference = _accumulation_reference(micro, steps, seed)
        states = [result["state"] for result in results]
        if not _close(states[0], states[1]):
            fail("ranks-differ", observed=f"the ranks' parameters differ by {_max_difference(states[0], states[1]):.2e}",
                 expected="identical parameters", cause="an optimizer step happened on gradients that were not averaged",
                 where="step once, after the last (synchronised) backward")
        if not _close(states[0], reference):
            fail("wrong-update", observed=f"parameters differ from one process on the whole batch by {_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}",
                 cause="the accumulated gradient is not the whole batch's mean gradient: divide each micro-batch loss by "
                 "the number of micro-batches, step once per call, and clear the gradients after stepping",
                 where="loss / len(micro_batches); optimizer.step(); optimizer.zero_grad(set_to_none=True)")
    return "one all-reduce per optimizer step; the update equals one process on the whole batch"
