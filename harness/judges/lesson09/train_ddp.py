"""09-train-ddp, the judge: Compare the ranks with each other, and with one process at twice the batch trained here."""

from __future__ import annotations

from typing import Any, NoReturn

import torch
from torch import nn
from torch.utils.data import TensorDataset

from harness.checks.lesson09.common import WORLD, detached_state, make_model
from harness.checks.lesson09.train_ddp import regression_data, train_arguments, train_configs
from harness.contract.case import Case
from harness.contract.compare import close_state, int_list, malformed, tensor_dict
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson09.common import TOLERANCE, _hang_row, _ranks, _same_layout, _state_max_difference


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
    return detached_state(model.state_dict())


@judges(
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
def judge_train_ddp(seen: dict, *, case: Case) -> str:
    """Compare the ranks with each other, and with one process at twice the batch trained here."""
    for config, run in zip(train_configs(case), seen["runs"], strict=True):
        results = _ranks(run)
        _check_sharding([int_list(result["seen"], "the indices a rank saw") for result in results], config["n"],
                        config["epochs"])
        for result in results:
            _judge_state_kind(result["state"])
        states = [tensor_dict(result["state"], "a rank's state") for result in results]
        wrapped = [k for k in states[0] if k.startswith("module.")]
        if wrapped:
            fail("wrapped-state-dict", observed=f"keys like {wrapped[0]!r}",
                 expected="the plain model's keys ('0.weight', ...)",
                 cause="the state_dict of the DDP wrapper was returned: its keys carry 'module.' and will not load "
                 "into a plain model", where="return model.module.state_dict()")
        dataset = regression_data(config["n"], seed=config["data_seed"])
        reference = reference_training(dataset, model_seed=config["model_seed"], **train_arguments(config))
        for state in states:
            if not _same_layout(state, reference):
                shapes = [tuple(v.shape) for v in state.values()]
                fail("wrong-state-dict", observed=f"keys {sorted(state)} of shapes {shapes}",
                     expected=f"keys {sorted(reference)} of the model's shapes",
                     cause="something other than the trained model's state_dict was returned",
                     where="the return statement")
        if not close_state(states[0], states[1], rtol=TOLERANCE, atol=TOLERANCE, dtype=False):
            _fail_ranks_differ(_forwards(results[0].get("forwards")),
                               _state_max_difference(states[0], states[1]))
        if not close_state(states[0], reference, rtol=TOLERANCE, atol=TOLERANCE, dtype=False):
            fail("not-ddp-equivalent",
                 observed=f"parameters differ from one process with batch {WORLD * config['batch_size']} by up to "
                 f"{_state_max_difference(states[0], reference):.2e}",
                 expected=f"the same parameters within {TOLERANCE:g}: DDP over {WORLD} ranks of batch "
                 f"{config['batch_size']} is one process with batch {WORLD * config['batch_size']}",
                 cause="the update differs: a rescaled loss or learning rate, a missing zero_grad, a different "
                 "optimizer, or extra steps",
                 where="the inner loop: zero_grad, loss_fn(model(x), y).backward(), step, with plain SGD(lr)")
    return f"DDP on {WORLD} ranks matches one process at twice the batch; ranks identical; set_epoch reshuffles"


def _forwards(value: Any) -> dict[str, int]:
    """How a rank's model forwards were reached ('ddp', 'bypassed', 'plain' -> count), validated."""
    if not isinstance(value, dict) or not set(value) <= {"ddp", "bypassed", "plain"} or not all(
            isinstance(count, int) and not isinstance(count, bool) and count > 0 for count in value.values()):
        malformed("the forwards' paths are counts by 'ddp', 'bypassed' and 'plain'")
    return value


def _fail_ranks_differ(forwards: dict[str, int], difference: float) -> NoReturn:
    """The ranks ended apart: name the cause the forwards' paths show (through ddp.module, or no DDP at all)."""
    bypassed, plain, through = (forwards.get(key, 0) for key in ("bypassed", "plain", "ddp"))
    if bypassed and not through:
        cause = ("the forward went through .module (the model inside DDP) instead of the DDP wrapper, so DDP's "
                 "gradient all-reduce never ran: each rank stepped on its own gradients")
        where, hint = ("call the wrapper: loss_fn(ddp_model(x), y), and keep .module for the state_dict at the end",
                       "Which object does your loop call on a batch: the DDP wrapper, or the model inside it? Only "
                       "the wrapper's forward prepares the all-reduce that backward runs.")
    elif plain and not through:
        cause, hint = ("the model is not wrapped in DDP: no forward went through a DistributedDataParallel, so each "
                       "rank trains its own copy on its own shard"), None
        where = "model = DDP(make_model()) before building the optimizer from model.parameters()"
    elif through:
        cause, hint = ("gradients are not averaged across ranks although the forwards went through DDP: the "
                       "optimizer was built on other parameters, or the gradients changed after backward"), None
        where = "model = DDP(make_model()) before building the optimizer from model.parameters()"
    else:
        cause, hint = ("gradients are not averaged across ranks: the model is not wrapped in DDP, or the optimizer "
                       "was built on other parameters"), None
        where = "model = DDP(make_model()) before building the optimizer from model.parameters()"
    seen = (f"; rank 0's model ran {bypassed} forward{'s' if bypassed > 1 else ''} called directly while a DDP "
            "wrapper held it, none through the wrapper" if bypassed and not through else "")
    fail("ranks-differ", observed=f"the ranks' parameters differ by up to {difference:.2e}{seen}",
         expected="identical parameters on every rank", cause=cause, where=where, hint=hint)


def _judge_state_kind(state: Any) -> None:
    """Fail unless train_ddp returned a dict of tensors (non-tensors arrive as their type's name)."""
    if isinstance(state, str):
        fail("wrong-state-dict", observed=f"train_ddp returned a {state}", expected="a state_dict: a dict of tensors",
             cause="something other than the model's state_dict is returned (the model itself, or nothing)",
             where="return model.module.state_dict()")
    if not isinstance(state, dict) or not all(isinstance(v, (torch.Tensor, str)) for v in state.values()):
        malformed("the returned state is not a dict of tensors")
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
