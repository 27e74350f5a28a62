"""Checks of lesson 09 (DDP): each probe runs the student's code on real gloo process groups of forked ranks.

Probes record, judges decide. A probe forks the ranks (`harness.launch.launch_forked`: no interpreter
starts, so a launch costs well under a second), runs the student's code in them, and returns what the
ranks produced as data: results and inputs after the call, parameters, the indices each rank loaded,
which ranks wrote files and what the files hold. Its judge rebuilds the case's inputs and recomputes the
references in-process on tiny tensors (no processes, no DDP, no files of the student's).

What is compared, and the tolerance: plain SGD (no momentum, no weight decay) in float32 on a tiny MLP;
DDP on 2 ranks with per-rank batch B against one process with batch 2B on the same samples in the same
order. The two differ only in the order float32 additions happen (DDP sums the two ranks' gradients, one
process sums all 2B samples at once), so parameters agree to about 1e-6: the checks allow 1e-4 (absolute
and relative).
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

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.contract.wire import WireError, type_name
from harness.launch import LaunchError, launch_forked

WORLD = 2
LAUNCH_TIMEOUT_S = 30  # per attempt: generous for a loaded grading machine, far beyond a correct run
TOLERANCE = 1e-4
MODEL_SEED = 1234
CHECKPOINT_NAME = "checkpoint.pt"


# ----------------------------------------------------------------------------------------------------
# Shared pieces


def make_model(seed: int = MODEL_SEED) -> nn.Module:
    """The checks' tiny regression MLP, initialised identically on every call with the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


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


# What gloo says, depending on timing, when the peer of a waiting rank has returned and closed its socket.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def _report_launch_error(error: LaunchError) -> NoReturn:
    """Turn a failed launch into the student's failure: a hang, a rank left waiting in a collective its peer never
    called (both seen only here), or the exception a rank raised."""
    last = str(error).strip().splitlines()[-1]
    if "did not finish" in str(error):
        fail("hang", observed=f"the ranks did not finish within {LAUNCH_TIMEOUT_S} s, twice",
             expected="every rank returns", cause="one rank waits in a collective (all_reduce, barrier) "
             "that another rank never calls, e.g. a collective inside `if rank == 0:`, or two ranks wait for each "
             "other (each receives before it sends)",
             where="collectives and barriers: every rank must call them, in the same order")
    if any(sign in str(error) for sign in _PEER_GONE):  # the first failure: the peer had returned, not crashed
        fail("hang", observed=f"rank {error.rank} was still waiting in a collective when the other rank closed "
             "its connection (it had returned, or ended without a Python error)",
             expected="every rank calls the same collectives, in the same order",
             cause="a collective (all_reduce, barrier, broadcast) that only some ranks call: inside "
             "`if rank == 0:`, or after a return that only some ranks take; less often, the other rank was killed "
             "(out of memory)",
             where="collectives and barriers: call them outside any `if rank == ...:` block")
    raise RuntimeError(f"on rank {error.rank}: {last}") from None


def _hang_row(collective: str) -> dict[str, Requirement]:
    """The requirement row of every check that launches ranks: no rank is left waiting in a collective."""
    return {"hang": Requirement(
        f"every rank calls the same collectives ({collective}), in the same order",
        hint="A rank was left waiting for the others: is there a collective that only some ranks reach?")}


def _detached_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of a state_dict's tensors, to send back from a rank."""
    return {k: v.detach().clone() for k, v in state.items()}


def _malformed(what: str) -> NoReturn:
    """Refuse an observation that no probe of this module writes (forged or corrupted)."""
    raise WireError(f"malformed observation: {what}")


def _ranks(value: Any, count: int = WORLD) -> list[Any]:
    """The per-rank list of an observation, validated to hold `count` entries."""
    if not isinstance(value, list) or len(value) != count:
        _malformed(f"expected a list of {count} per-rank entries")
    return value


def _int_list(value: Any) -> list[int]:
    """A recorded list of indices, validated."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        _malformed("expected a list of ints")
    return value


def _tensor_dict(value: Any) -> dict[str, torch.Tensor]:
    """A recorded state_dict (str -> tensor), validated."""
    if not isinstance(value, dict) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        _malformed("expected a dict of tensors")
    return value




def _same_layout(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    """Whether `state` has exactly the reference's keys, each a tensor of the reference's shape."""
    return set(state) == set(reference) and all(
        isinstance(state[k], torch.Tensor) and state[k].shape == reference[k].shape for k in reference
    )


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state_dicts of the same layout."""
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state_dicts of the same layout agree within TOLERANCE."""
    return all(torch.allclose(a[k].float(), b[k].float(), atol=TOLERANCE, rtol=TOLERANCE) for k in b)


# ----------------------------------------------------------------------------------------------------
# 09-ddp-mean


def _mean_inputs(case: Case) -> list[list[torch.Tensor]]:
    """Per input, the value each rank holds: b + 1 on rank 0, -2b on rank 1, for a shifted base b that is never
    1 or -1/3 in every element (there the sum, the mean or a rank's own value would coincide)."""
    bases = [torch.tensor(3.0), torch.tensor([0.25, -2.0, 4.0], dtype=torch.float64)]
    if case.hidden:
        bases = [torch.tensor(1.5), torch.tensor([[0.75, 5.0], [-3.0, 2.5]], dtype=torch.float64)]
    shift = (case.seed % 101) / 4  # exact in float32: 0 for the visible and local cases
    return [[base + shift + 1.0, (base + shift) * -2.0] for base in bases]


def _mean_worker(ddp_mean: Callable[[torch.Tensor], torch.Tensor], values: list[torch.Tensor]) -> dict[str, Any]:
    """In a rank: call ddp_mean on this rank's value; what it returned, and the value afterwards."""
    mine = values[dist.get_rank()].clone()
    out = ddp_mean(mine)
    return {"out": out.detach().clone() if isinstance(out, torch.Tensor) else out, "input_after": mine}


@register(
    "09-ddp-mean",
    hints=Hints(
        nudge="Every rank holds its own value; an all_reduce with SUM leaves the sum on every rank. "
        "What do you divide it by, and which tensor does all_reduce overwrite?",
        concept="dist.all_reduce(t) replaces t, in place, with the element-wise sum over ranks, on every rank; "
        "every rank must call it",
        solution="total = value.detach().clone(); dist.all_reduce(total, op=dist.ReduceOp.SUM); "
        "return total / dist.get_world_size()",
        section="2. Collectives: what moves between processes"),
    requires={
        "not-a-tensor": Requirement("returns a tensor",
                                    hint="What type does ddp_mean return? The text asks for a tensor."),
        "not-averaged": Requirement("communicates: each rank gets the mean over all ranks, not its own value",
                                    hint="Each rank got back its own value: which collective brings the others' in?"),
        "summed": Requirement("the mean, not the sum", hint="Every rank got the sum over ranks: one step is missing."),
        "wrong-mean": Requirement("the mean over ranks, element-wise, of the input's shape, on every rank",
                                  hint="Compare what each rank got with (value on rank 0 + value on rank 1) / 2."),
        "modified-input": Requirement("value itself is left unchanged",
                                      hint="The caller's tensor changed: which call works in place on its argument?"),
        **_hang_row("all_reduce"),
    },
)
def probe_ddp_mean(ddp_mean: Callable[[torch.Tensor], torch.Tensor], *, case: Case) -> dict:
    """Run ddp_mean on 2 ranks holding different values; record what every rank got and its input afterwards."""
    return {"runs": [_run_ranks(_mean_worker, ddp_mean, values) for values in _mean_inputs(case)]}


@judges("09-ddp-mean")
def judge_ddp_mean(seen: dict, *, case: Case) -> str:
    """Every rank must get the mean over ranks, and its input must be left unchanged."""
    for values, run in zip(_mean_inputs(case), seen["runs"], strict=True):
        expected = (values[0] + values[1]) / 2
        for rank, result in enumerate(_ranks(run)):
            out = result["out"]
            if not isinstance(out, torch.Tensor):
                cause = ("the result was turned into a Python number (.item(), float() or .tolist())"
                         if isinstance(out, (float, int, list))
                         else "the function returns something other than a tensor")
                fail("not-a-tensor", observed=f"rank {rank} got a {type_name(out)}", expected="a tensor",
                     cause=cause, where="the return statement of ddp_mean")
            if out.shape != expected.shape:
                fail("wrong-mean", observed=f"rank {rank} got a tensor of shape {tuple(out.shape)}",
                     expected=f"the mean over ranks, {expected.tolist()}, of the input's shape {tuple(expected.shape)}",
                     cause="the result is reshaped, stacked or indexed instead of reduced element-wise",
                     where="ddp_mean: all_reduce a copy of the input, then divide")
            out = out.detach().to(expected.dtype)
            if torch.allclose(out, values[rank]) and not torch.allclose(values[rank], expected):
                fail("not-averaged", observed=f"rank {rank} got its own value {values[rank].tolist()}",
                     expected=f"the mean over ranks, {expected.tolist()}, on every rank",
                     cause="the value is returned without communicating: no all_reduce, so each rank reports "
                     "only its own shard's metric", where="ddp_mean: all_reduce a copy, then divide")
            if torch.allclose(out, values[0] + values[1]):
                fail("summed", observed=f"rank {rank} got the sum {out.tolist()}",
                     expected=f"the mean {expected.tolist()}",
                     cause="all_reduce(SUM) without dividing by the world size",
                     where="divide by dist.get_world_size() after the all_reduce")
            if not torch.allclose(out, expected):
                fail("wrong-mean", observed=f"rank {rank} got {out.tolist()}", expected=f"{expected.tolist()}",
                     cause="the reduction or the division is not the mean over ranks", where="ddp_mean")
            after = result["input_after"]
            if not isinstance(after, torch.Tensor):
                _malformed("input_after is not a tensor")
            if not torch.equal(after, values[rank]):
                fail("modified-input", observed=f"rank {rank}'s input became {after.tolist()}",
                     expected=f"the input left as {values[rank].tolist()}",
                     cause="dist.all_reduce works in place: reducing the caller's tensor overwrites their metric",
                     where="all_reduce a clone: total = value.detach().clone()")
    return "every rank gets the mean over ranks; inputs are left unchanged"


# ----------------------------------------------------------------------------------------------------
# 09-shard-loader


def _loader_settings(case: Case) -> list[tuple[int, int, int, int]]:
    """(dataset size, per-rank batch size, world size, seed) of each loader world to build."""
    settings = [(40, 4, 2, 0), (37, 3, 3, 5)]  # the second: three ranks, a dataset that does not divide evenly
    if case.hidden:
        settings = [(38, 4, 2, 3), (37, 3, 3, 5), (64, 8, 4, 11)]
    return [(n, batch_size, world, case.seeded(seed)) for n, batch_size, world, seed in settings]


def _loader_indices(loader: DataLoader, epoch: int) -> list[list[int]] | None:
    """The sample indices of each batch after set_epoch(epoch); None where the sampler has no set_epoch."""
    set_epoch = getattr(loader.sampler, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    elif epoch > 0:
        return None
    return [batch[0].reshape(-1).tolist() for batch in loader]


@register(
    "09-shard-loader",
    hints=Hints(
        nudge="A DistributedSampler gives each rank its own shard; the DataLoader then batches that shard. "
        "Pass the sampler, not shuffle=True, to the DataLoader.",
        concept="DistributedSampler(dataset, num_replicas, rank, shuffle, seed) draws one permutation seeded with "
        "seed + epoch, the same on every rank, and gives rank r every world_size-th index from r",
        solution="sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed); "
        "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
        section="3. Each rank its own shard: `DistributedSampler` and `set_epoch`"),
    requires={
        "wrong-batch-size": Requirement("batches of batch_size samples per rank",
                                        hint="batch_size is per rank: does your loader change it with the world size?"),
        "overlapping-shards": Requirement(
            "each rank its own shard: disjoint, together the whole dataset, for any world size",
            hint="Some samples reach two ranks: do all ranks draw the same permutation, and split it by rank?"),
        "not-shuffled": Requirement("the shard is shuffled", hint="Rank 0 reads its samples in increasing order."),
        "seed-ignored": Requirement("shuffled with `seed`", hint="Two seeds gave the same order: where does seed go?"),
        "same-order-every-epoch": Requirement(
            "set_epoch(epoch) on the loader's sampler reshuffles",
            hint="The order must change with sampler.set_epoch(epoch): which sampler reseeds itself with the epoch?"),
        "uses-workers": Requirement("no worker processes (num_workers=0)",
                                    hint="The text asks for no worker processes: look at the DataLoader's arguments."),
    },
)
def probe_shard_loader(make_ddp_loader: Callable[..., DataLoader], *, case: Case) -> dict:
    """Build the loader of every rank of each world; record the batches of epoch 0, of rank 0 with the next
    seed, and of rank 0 in epoch 1. A loader with worker processes fails here, before any is started."""
    worlds = []
    for n, batch_size, world, seed in _loader_settings(case):
        dataset = TensorDataset(torch.arange(n))
        loaders = [make_ddp_loader(dataset, batch_size, rank=r, world_size=world, seed=seed) for r in range(world)]
        workers = getattr(loaders[0], "num_workers", 0)
        if workers:
            fail("uses-workers", observed=f"a DataLoader with num_workers={workers}", expected="num_workers=0",
                 cause="num_workers is set: each worker is a process the check (and a notebook) has to start",
                 where="the DataLoader's arguments: leave num_workers out")
        epoch0 = [_loader_indices(loader, epoch=0) for loader in loaders]
        reseeded_loader = make_ddp_loader(dataset, batch_size, rank=0, world_size=world, seed=seed + 1)
        reseeded = _loader_indices(reseeded_loader, epoch=0)
        worlds.append({"epoch0": epoch0, "reseeded": reseeded, "epoch1": _loader_indices(loaders[0], epoch=1),
                       "sampler": type(loaders[0].sampler).__name__})
    return {"worlds": worlds}


def _batches(value: Any) -> list[list[int]]:
    """A recorded list of batches of indices, validated."""
    if not isinstance(value, list):
        _malformed("expected a list of batches")
    return [_int_list(batch) for batch in value]


@judges("09-shard-loader")
def judge_shard_loader(seen: dict, *, case: Case) -> str:
    """Shards must be disjoint, cover the data, come in per-rank batches, be shuffled, seeded and reshuffle."""
    for (n, batch_size, world, seed), observed in zip(_loader_settings(case), seen["worlds"], strict=True):
        epoch0 = [_batches(batches) for batches in _ranks(observed["epoch0"], world)]
        shards = [sum(batches, []) for batches in epoch0]
        sizes = [len(batch) for batch in epoch0[0]]
        if sizes and sizes[0] != batch_size:
            fail("wrong-batch-size", observed=f"batches of {sizes[0]} samples on a rank",
                 expected=f"{batch_size} (per rank)",
                 cause="batch_size is the per-rank batch: do not divide or multiply it by the world size",
                 where="the DataLoader's batch_size")
        covered = set().union(*map(set, shards)) & set(range(n))
        if any(len(shard) > -(-n // world) for shard in shards) or len(covered) < world * (n // world):
            if all(len(shard) >= n for shard in shards):
                cause = ("every rank reads the whole dataset: shuffle=True or a RandomSampler instead of a "
                         "DistributedSampler")
            else:
                cause = ("the ranks' shards overlap or leave samples out: the ranks draw different permutations "
                         "(a seed that differs per rank), or num_replicas and rank are not the ones passed in")
            fail("overlapping-shards", observed=f"{world} ranks loaded {[len(s) for s in shards]} samples, "
                 f"{len(covered)} distinct of {n}",
                 expected=f"each rank about {n // world} samples, together all {n}", cause=cause,
                 where="pass sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed) "
                 "to the DataLoader")
        if shards[0] == sorted(shards[0]) and n > 8:
            fail("not-shuffled", observed=f"rank 0 reads samples in increasing order {shards[0][:6]}...",
                 expected="a shuffled order", cause="shuffle=False in the sampler, or a shard taken from the "
                 "indices without a permutation",
                 where="DistributedSampler(..., shuffle=True)")
        if sum(_batches(observed["reseeded"]), []) == shards[0]:
            fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give rank 0 the same order",
                 expected="the seed to choose the permutation", cause="the seed argument is not passed to the sampler",
                 where="DistributedSampler(..., seed=seed)")
        if observed["epoch1"] is None:
            fail("same-order-every-epoch", observed=f"the loader's sampler ({observed['sampler']}) has no set_epoch",
                 expected="a sampler whose set_epoch(epoch) reshuffles", cause="not a DistributedSampler",
                 where="DataLoader(dataset, batch_size=..., sampler=DistributedSampler(...))")
        if sum(_batches(observed["epoch1"]), []) == shards[0]:
            fail("same-order-every-epoch", observed="set_epoch(1) leaves rank 0's order unchanged",
                 expected="a new permutation each epoch", cause="the sampler ignores the epoch",
                 where="use torch.utils.data.DistributedSampler, whose set_epoch reseeds the shuffle")
    return "disjoint shards covering the data, per-rank batches, seeded and reshuffled by set_epoch"


# ----------------------------------------------------------------------------------------------------
# 09-train-ddp


def _train_configs(case: Case) -> list[dict[str, Any]]:
    """Each training run: dataset size n, the train_ddp arguments, and the seeds of the data and the model."""
    configs = [dict(n=64, epochs=3, batch_size=8, lr=0.05, seed=0)]
    if case.hidden:
        configs = [dict(n=48, epochs=2, batch_size=4, lr=0.1, seed=7),
                   dict(n=80, epochs=3, batch_size=10, lr=0.02, seed=3)]
    return [{**config, "seed": case.seeded(config["seed"]), "data_seed": case.seeded(config["seed"] + 100),
             "model_seed": case.seeded(MODEL_SEED)} for config in configs]


def _train_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments train_ddp receives."""
    return {key: config[key] for key in ("epochs", "batch_size", "lr", "seed")}


def _train_worker(
    train_ddp: Callable[..., Any], model_seed: int, dataset: Dataset, arguments: dict[str, Any]
) -> dict[str, Any]:
    """In a rank: train with train_ddp; the state_dict it returned and the dataset indices this rank loaded."""
    recorder = IndexRecorder(dataset)
    state = train_ddp(functools.partial(make_model, model_seed), recorder, nn.functional.mse_loss, **arguments)
    if not isinstance(state, dict):
        return {"state": type_name(state), "seen": recorder.seen}
    # a value that is no tensor (a nested dict: a checkpoint instead of a state_dict) travels as its type's name
    sent = {str(k): v.detach().clone() if isinstance(v, torch.Tensor) else type_name(v) for k, v in state.items()}
    return {"state": sent, "seen": recorder.seen}


def reference_training(dataset: TensorDataset, *, model_seed: int, epochs: int, batch_size: int, lr: float, seed: int,
                       world: int = WORLD) -> dict[str, torch.Tensor]:
    """One process, batch world*batch_size, the DistributedSampler's permutation of each epoch, plain SGD."""
    model = make_model(model_seed)
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
    return _detached_state(model.state_dict())


@register(
    "09-train-ddp",
    hints=Hints(
        nudge="Four DDP ingredients: a sharded loader, the model wrapped in DDP (before the optimizer is built), "
        "sampler.set_epoch(epoch) at the start of each epoch, and the unwrapped model's state_dict at the end.",
        concept="DDP all-reduces the gradients in backward, so 2 ranks of batch B step like one process of batch 2B; "
        "the DistributedSampler shards the data and set_epoch reshuffles it",
        solution="sampler = DistributedSampler(dataset, seed=seed); "
        "loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler); "
        "model = DDP(make_model()); optimizer = SGD(model.parameters(), lr=lr); for epoch: sampler.set_epoch(epoch); "
        "for x, y: zero_grad, loss_fn(model(x), y).backward(), step; return model.module.state_dict()",
        section="4. How DDP averages gradients"),
    requires={
        "no-samples-seen": Requirement("trains on the dataset passed in, in this process (no workers)",
                                       hint="A rank loaded nothing from the dataset it was given: "
                                       "what did it train on?"),
        "not-sharded": Requirement("each rank its own half of the data each epoch (a DistributedSampler)",
                                   hint="Both ranks read the same samples: what gives each rank its own shard?"),
        "missing-set-epoch": Requirement("set_epoch(epoch) every epoch: a new order each epoch",
                                         hint="Every epoch read the samples in the same order: what tells the sampler "
                                         "which epoch it is?"),
        "wrapped-state-dict": Requirement("returns the unwrapped model's state_dict",
                                          hint="The keys start with 'module.': whose state_dict was returned?"),
        "wrong-state-dict": Requirement("returns the trained model's state_dict itself (names -> tensors)",
                                        hint="Compare what you return with model.module.state_dict(): "
                                        "keys and values."),
        "ranks-differ": Requirement("gradients averaged across ranks: identical weights on every rank",
                                    hint="The ranks ended with different weights: what averages their gradients?"),
        "not-ddp-equivalent": Requirement(
            "plain SGD(lr), one zero_grad/backward/step per batch: the steps of one process at twice the batch",
            hint="The ranks agree but took other steps than one process at batch 2B: compare your inner loop and "
            "optimizer with the text's."),
        **_hang_row("DDP's gradient all-reduce, any barrier"),
    },
)
def probe_train_ddp(train_ddp: Callable[..., dict[str, torch.Tensor]], *, case: Case) -> dict:
    """Train on 2 ranks; record each rank's returned state_dict and the dataset indices it loaded."""
    runs = []
    for config in _train_configs(case):
        dataset = regression_data(config["n"], seed=config["data_seed"])
        runs.append(_run_ranks(_train_worker, train_ddp, config["model_seed"], dataset, _train_arguments(config)))
    return {"runs": runs}


@judges("09-train-ddp")
def judge_train_ddp(seen: dict, *, case: Case) -> str:
    """Compare the ranks with each other, and with one process at twice the batch trained here."""
    for config, run in zip(_train_configs(case), seen["runs"], strict=True):
        results = _ranks(run)
        _check_sharding([_int_list(result["seen"]) for result in results], config["n"], config["epochs"])
        for result in results:
            _judge_state_kind(result["state"])
        states = [_tensor_dict(result["state"]) for result in results]
        wrapped = [k for k in states[0] if k.startswith("module.")]
        if wrapped:
            fail("wrapped-state-dict", observed=f"keys like {wrapped[0]!r}",
                 expected="the plain model's keys ('0.weight', ...)",
                 cause="the state_dict of the DDP wrapper was returned: its keys carry 'module.' and will not load "
                 "into a plain model", where="return model.module.state_dict()")
        dataset = regression_data(config["n"], seed=config["data_seed"])
        reference = reference_training(dataset, model_seed=config["model_seed"], **_train_arguments(config))
        for state in states:
            if not _same_layout(state, reference):
                shapes = [tuple(v.shape) for v in state.values()]
                fail("wrong-state-dict", observed=f"keys {sorted(state)} of shapes {shapes}",
                     expected=f"keys {sorted(reference)} of the model's shapes",
                     cause="something other than the trained model's state_dict was returned",
                     where="the return statement")
        if not _close(states[0], states[1]):
            fail("ranks-differ",
                 observed=f"the ranks' parameters differ by up to {_max_difference(states[0], states[1]):.2e}",
                 expected="identical parameters on every rank",
                 cause="gradients are not averaged across ranks: the model is not wrapped in DDP (each rank trains "
                 "its own copy on its own shard), or the optimizer was built on other parameters",
                 where="model = DDP(make_model()) before building the optimizer from model.parameters()")
        if not _close(states[0], reference):
            fail("not-ddp-equivalent",
                 observed=f"parameters differ from one process with batch {WORLD * config['batch_size']} by up to "
                 f"{_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}: DDP over {WORLD} ranks of batch "
                 f"{config['batch_size']} is one process with batch {WORLD * config['batch_size']}",
                 cause="the update differs: a rescaled loss or learning rate, a missing zero_grad, a different "
                 "optimizer, or extra steps",
                 where="the inner loop: zero_grad, loss_fn(model(x), y).backward(), step, with plain SGD(lr)")
    return f"DDP on {WORLD} ranks matches one process at twice the batch; ranks identical; set_epoch reshuffles"


def _judge_state_kind(state: Any) -> None:
    """Fail unless train_ddp returned a dict of tensors (non-tensors arrive as their type's name)."""
    if isinstance(state, str):
        fail("wrong-state-dict", observed=f"train_ddp returned a {state}", expected="a state_dict: a dict of tensors",
             cause="something other than the model's state_dict is returned (the model itself, or nothing)",
             where="return model.module.state_dict()")
    if not isinstance(state, dict) or not all(isinstance(v, (torch.Tensor, str)) for v in state.values()):
        _malformed("the returned state is not a dict of tensors")
    others = {k: v for k, v in state.items() if isinstance(v, str)}
    if others:
        key, kind = next(iter(others.items()))
        fail("wrong-state-dict", observed=f"the returned dict's key {key!r} holds a value of type {kind}, not a tensor",
             expected="a state_dict: parameter names -> tensors",
             cause="a checkpoint-style dict ({'model': ...}) or other objects are returned instead of the state_dict",
             where="return model.module.state_dict()")


def _check_sharding(seen: list[list[int]], n: int, epochs: int) -> None:
    """Each rank loaded its own half of the data each epoch, in a new order each epoch."""
    per_rank = n // WORLD
    for rank, indices in enumerate(seen):
        if len(indices) == 0:
            fail("no-samples-seen", observed=f"rank {rank} loaded no sample from the dataset it was given",
                 expected=f"{per_rank} samples per epoch", cause="the dataset passed in is not the one trained on, "
                 "or DataLoader workers (num_workers > 0) load it in other processes",
                 where="the DataLoader (keep num_workers=0 here)")
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


def _save_epoch(case: Case) -> int:
    """The epoch number the save is called with."""
    return (7 if case.hidden else 3) + case.seed % 89


def _save_model_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The one step the model takes before it is saved (the same on every rank: equal inputs, equal gradients)."""
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


def _save_worker(
    save_checkpoint_ddp: Callable[..., None], rank_dirs: list[str], epoch: int, model_seed: int
) -> dict[str, Any]:
    """In a rank, in its own folder: step a DDP model once, save it; whether rank 0's file existed on return."""
    rank = dist.get_rank()
    os.chdir(rank_dirs[rank])  # a relative path lands in this rank's own folder: who wrote is visible on disk
    model = DDP(make_model(model_seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _save_model_step(model, optimizer)
    if rank == 0:
        time.sleep(0.4)  # rank 0 arrives late: a rank that does not wait for its save returns before the file exists
    save_checkpoint_ddp(model, optimizer, epoch, CHECKPOINT_NAME)
    return {"rank0_file_exists_on_return": (Path(rank_dirs[0]) / CHECKPOINT_NAME).exists()}


@register(
    "09-save-rank0",
    hints=Hints(
        nudge="Only one process should write the file, and the others must not go on before it exists.",
        concept="rank 0 does the once-only work; a dist.barrier() that every rank calls holds the others until it "
        "is done",
        solution="if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), "
        "'optimizer': optimizer.state_dict(), 'epoch': epoch}, path); then dist.barrier() on every rank",
        section="5. Rank 0's duties, and barriers"),
    requires={
        "saved-on-every-rank": Requirement("only rank 0 writes", hint="Several ranks wrote the file: who should?"),
        "not-saved-on-rank0": Requirement("rank 0 writes the checkpoint at `path`",
                                          hint="Rank 0's folder has no file at the path it was given: which rank "
                                          "saved, and under which name?"),
        "missing-barrier": Requirement("no rank returns before the file is complete",
                                       hint="Rank 1 returned while rank 0 was still saving: what makes it wait?"),
        "incomplete-checkpoint": Requirement("the checkpoint holds 'model', 'optimizer' and 'epoch'",
                                             hint="A key is missing from the saved dict: compare it with the text."),
        "wrapped-state-dict": Requirement("'model' is the unwrapped model's state_dict",
                                          hint="The saved keys start with 'module.': which model's state_dict is it?"),
        "wrong-state-dict": Requirement("'model' holds the model's current state_dict",
                                        hint="'model' is not the model's state after its step: what did you save?"),
        "wrong-epoch": Requirement("'epoch' is the epoch passed in",
                                   hint="The saved epoch is not the argument: save it as it was given."),
        **_hang_row("the barrier"),
    },
)
def probe_save_rank0(save_checkpoint_ddp: Callable[..., None], *, case: Case) -> dict:
    """Call the save on 2 ranks, each in its own folder; record the files in each folder, whether rank 0's file
    existed when each rank returned, and rank 0's checkpoint read back."""
    with tempfile.TemporaryDirectory(prefix="check-09-save-") as tmp:
        rank_dirs = [os.path.join(tmp, f"rank{r}") for r in range(WORLD)]
        for folder in rank_dirs:
            os.makedirs(folder)
        results = _run_ranks(_save_worker, save_checkpoint_ddp, rank_dirs, _save_epoch(case), case.seeded(MODEL_SEED))
        checkpoint_path = Path(rank_dirs[0]) / CHECKPOINT_NAME
        return {
            "files": [sorted(os.listdir(folder)) for folder in rank_dirs],
            "file_existed_on_return": [result["rank0_file_exists_on_return"] for result in results],
            "checkpoint": torch.load(checkpoint_path, weights_only=True) if checkpoint_path.is_file() else None,
        }


@judges("09-save-rank0")
def judge_save_rank0(seen: dict, *, case: Case) -> str:
    """Only rank 0's folder may get the file, before any rank returns; it must hold the model after its step."""
    files = [_string_list(names) for names in _ranks(seen["files"])]
    written = [r for r in range(WORLD) if files[r]]
    if written != [0]:
        if 0 in written:
            fail("saved-on-every-rank", observed=f"ranks {written} each wrote a checkpoint",
                 expected="only rank 0 writes", cause="the save is not guarded: every rank writes the same "
                 "file (wasted I/O, and on a shared disk a corrupt file when writes interleave)",
                 where="if dist.get_rank() == 0: torch.save(...)")
        fail("not-saved-on-rank0", observed=f"files written by ranks {written or 'none'}",
             expected="rank 0 writes the checkpoint", cause="the guard selects the wrong rank, or nothing is saved",
             where="if dist.get_rank() == 0: torch.save(..., path)")
    checkpoint = seen["checkpoint"]
    if checkpoint is None:
        fail("not-saved-on-rank0", observed=f"rank 0 wrote {files[0]}, none of them at the path it was given",
             expected=f"the checkpoint at the path passed in ({CHECKPOINT_NAME!r})",
             cause="the file is saved under another name than `path`", where="torch.save(..., path)")
    if not all(existed is True for existed in _ranks(seen["file_existed_on_return"])):
        fail("missing-barrier", observed="rank 1 returned before rank 0 had written the checkpoint",
             expected="every rank returns only once the file exists",
             cause="no barrier after the save: the other ranks race ahead (and may read a file that is not there yet)",
             where="dist.barrier() after the guarded save, on every rank")
    missing = [key for key in ("model", "optimizer", "epoch")
               if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        fail("incomplete-checkpoint",
             observed=f"keys {sorted(checkpoint)}" if isinstance(checkpoint, dict) else f"a {type_name(checkpoint)}",
             expected="'model', 'optimizer' and 'epoch'",
             cause="a resumable checkpoint needs all three", where="the dict passed to torch.save")
    saved = checkpoint["model"]
    if isinstance(saved, dict) and any(key.startswith("module.") for key in saved):
        fail("wrapped-state-dict", observed="model keys start with 'module.'", expected="the plain model's keys",
             cause="the DDP wrapper's state_dict was saved: it will not load into a plain model",
             where="save model.module.state_dict()")
    model = make_model(case.seeded(MODEL_SEED))
    _save_model_step(model, torch.optim.SGD(model.parameters(), lr=0.1))
    reference = _detached_state(model.state_dict())
    if not isinstance(saved, dict) or not _same_layout(saved, reference) or not _close(saved, reference):
        fail("wrong-state-dict", observed=f"'model' holds {_summary(saved, reference)}",
             expected=f"the model's state_dict after its step: keys {sorted(reference)}",
             cause="something other than the model's current state_dict was saved",
             where="'model': model.module.state_dict()")
    epoch = _save_epoch(case)
    if not _is_number(checkpoint["epoch"], epoch):
        fail("wrong-epoch", observed=f"epoch {checkpoint['epoch']!r}", expected=f"{epoch}",
             cause="the epoch passed in is not the one saved", where="'epoch': epoch")
    return "rank 0 alone writes a full checkpoint with the unwrapped model; the other ranks wait for it"


def _string_list(value: Any) -> list[str]:
    """A recorded list of file names, validated."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        _malformed("expected a list of file names")
    return value


def _summary(value: Any, reference: dict[str, torch.Tensor]) -> str:
    """A saved state_dict, or what was saved instead, in a few words."""
    if not isinstance(value, dict):
        return f"a {type_name(value)}"
    if _same_layout(value, reference):
        return "the model's keys with other values"
    return f"keys {sorted(value)[:6]}"


def _is_number(value: Any, number: int) -> bool:
    """Whether a saved value is `number`: an int, or a one-element tensor holding it."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and value.item() == number
    return isinstance(value, int) and not isinstance(value, bool) and value == number


# ----------------------------------------------------------------------------------------------------
# 09-no-sync


def _accumulation_settings(case: Case) -> list[tuple[int, int, int]]:
    """(micro-batches per step, optimizer steps, data seed) of each run."""
    settings = [(3, 2, 5), (2, 3, 9)] if case.hidden else [(4, 2, 0)]
    return [(micro, steps, case.seeded(seed)) for micro, steps, seed in settings]


def _micro_batches(seed: int, step: int, rank: int, micro: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of one rank at one optimizer step."""
    generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
    return [(torch.randn(4, 4, generator=generator), torch.randn(4, 1, generator=generator)) for _ in range(micro)]


def _accumulate_worker(
    accumulate_step: Callable[..., None], micro: int, steps: int, seed: int, model_seed: int
) -> dict[str, Any]:
    """In a rank: run the accumulation steps on a DDP model; its parameters and the all-reduces DDP made."""
    rank = dist.get_rank()
    model = DDP(make_model(model_seed))
    reductions = {"count": 0}

    def counting_allreduce(state, bucket):  # no annotations: DDP checks them, and this module's are strings
        reductions["count"] += 1
        buffer = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])

    model.register_comm_hook(None, counting_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        accumulate_step(model, optimizer, _micro_batches(seed, step, rank, micro), nn.functional.mse_loss)
    return {"state": _detached_state(model.module.state_dict()), "reductions": reductions["count"]}


def _accumulation_reference(micro: int, steps: int, seed: int, model_seed: int) -> dict[str, torch.Tensor]:
    """One process, one plain SGD step per optimizer step on all ranks' micro-batches at once."""
    model = make_model(model_seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        batches = [batch for rank in range(WORLD) for batch in _micro_batches(seed, step, rank, micro)]
        loss = nn.functional.mse_loss(model(torch.cat([x for x, _ in batches])), torch.cat([y for _, y in batches]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return _detached_state(model.state_dict())


@register(
    "09-no-sync",
    hints=Hints(
        nudge="DDP all-reduces gradients in every backward. Inside `with model.no_sync():` it does not; the gradients "
        "just accumulate locally. Which backward must synchronise?",
        concept="gradients add up in .grad across backward calls; no_sync only skips the communication, so the last "
        "backward, outside it, all-reduces the whole accumulated sum once",
        solution="for i, (x, y) in enumerate(micro_batches): last = i == len(micro_batches) - 1; "
        "with (nullcontext() if last else model.no_sync()): (loss_fn(model(x), y) / len(micro_batches)).backward(); "
        "then optimizer.step(); optimizer.zero_grad(set_to_none=True)",
        section="6. Gradient accumulation with `no_sync`"),
    requires={
        "never-synced": Requirement("the last micro-batch's backward synchronises",
                                    hint="No all-reduce happened at all: is every backward inside no_sync?"),
        "missing-no-sync": Requirement("only the last micro-batch's backward synchronises: one all-reduce per step",
                                       hint="Every micro-batch's backward communicated: which context skips that?"),
        "ranks-differ": Requirement("one step, on the averaged gradient: identical weights on every rank",
                                    hint="The ranks' weights differ: did a step run before the synchronised backward?"),
        "wrong-update": Requirement(
            "each loss divided by the number of micro-batches, one step per call, gradients cleared after it",
            hint="The ranks agree, but the step differs from one process on the whole batch: check the loss's "
            "scaling and what is left in .grad for the next call."),
        **_hang_row("DDP's gradient all-reduce"),
    },
)
def probe_no_sync(accumulate_step: Callable[..., None], *, case: Case) -> dict:
    """Run the accumulation on 2 ranks; record DDP's all-reduces (counted by a comm hook) and the parameters."""
    model_seed = case.seeded(MODEL_SEED)
    return {"runs": [_run_ranks(_accumulate_worker, accumulate_step, micro, steps, seed, model_seed)
                     for micro, steps, seed in _accumulation_settings(case)]}


@judges("09-no-sync")
def judge_no_sync(seen: dict, *, case: Case) -> str:
    """One all-reduce per optimizer step; the update must equal one process on the whole batch, computed here."""
    for (micro, steps, seed), run in zip(_accumulation_settings(case), seen["runs"], strict=True):
        results = _ranks(run)
        reductions = results[0]["reductions"]
        if not isinstance(reductions, int) or isinstance(reductions, bool):
            _malformed("the all-reduce count is not an int")
        if reductions == 0:
            fail("never-synced", observed="no gradient all-reduce happened",
                 expected=f"one per optimizer step ({steps})",
                 cause="every backward ran inside no_sync, the last one included, so the ranks never average",
                 where="run the last micro-batch's backward outside no_sync")
        if reductions > steps:
            fail("missing-no-sync",
                 observed=f"{reductions} gradient all-reduces for {steps} optimizer steps of {micro} micro-batches",
                 expected=f"{steps}: one per optimizer step", cause="every micro-batch's backward synchronises: "
                 "communication is paid micro-batch times for the same result",
                 where="wrap all but the last micro-batch's forward and backward in `with model.no_sync():`")
        reference = _accumulation_reference(micro, steps, seed, case.seeded(MODEL_SEED))
        states = [_tensor_dict(result["state"]) for result in results]
        if not all(_same_layout(state, reference) for state in states):
            _malformed("the ranks' states are not the model's state_dict")
        if not _close(states[0], states[1]):
            fail("ranks-differ",
                 observed=f"the ranks' parameters differ by {_max_difference(states[0], states[1]):.2e}",
                 expected="identical parameters",
                 cause="an optimizer step happened on gradients that were not averaged",
                 where="step once, after the last (synchronised) backward")
        if not _close(states[0], reference):
            fail("wrong-update", observed="parameters differ from one process on the whole batch by "
                 f"{_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}",
                 cause="the accumulated gradient is not the whole batch's mean gradient: divide each micro-batch "
                 "loss by the number of micro-batches, step once per call, and clear the gradients after stepping",
                 where="loss / len(micro_batches); optimizer.step(); optimizer.zero_grad(set_to_none=True)")
    return "one all-reduce per optimizer step; the update equals one process on the whole batch"
