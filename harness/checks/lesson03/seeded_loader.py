"""03-seeded-loader, the probe.

Record the batches of two epochs of two loaders built with the same seed (the global RNG reseeded
differently before each, and drawn from between the second one's epochs, as a model's initialisation and
dropout would) and of one epoch with the next seed; and the global RNG's seed after each build.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register


def loader_setting(case: Case) -> tuple[int, int, int]:
    """(dataset size, batch size, seed): a last, partial batch in both, so drop_last shows."""
    n, batch_size, seed = (53, 8, 2024) if case.hidden else (42, 10, 0)
    return n, batch_size, case.seeded(seed)


def _epoch_batches(loader: DataLoader) -> list[list[int]]:
    """The item indices of each batch of one epoch."""
    return [[int(i) for i in (batch[0] if isinstance(batch, (tuple, list)) else batch)] for batch in loader]


@register(
    "03-seeded-loader",
    hints=Hints(
        nudge="Give the DataLoader its own torch.Generator seeded with `seed`: the shuffling then depends on that "
        "seed only, and the generator moves on between epochs.",
        concept="shuffle=True draws each epoch's permutation from a generator: the loader's own if you pass "
        "generator=, else the global torch RNG, which everything else (model initialisation, dropout) draws from "
        "too. Seeding the global RNG only holds until the next draw.",
        solution="`return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=make_generator(seed))` "
        "(harness.repro.make_generator). Do not build a fixed permutation once: it would repeat every epoch.",
        section="3. Seeded shuffling",
    ),
    requires={
        "drops-samples": Requirement(
            "every item appears exactly once per epoch (the last, partial batch included)",
            hint="Count the items of one epoch with a dataset of 42 and batches of 10: all 42, each once?"),
        "wrong-batch-size": Requirement(
            "batches have `batch_size` items",
            hint="Print len(next(iter(loader))[0]): is it the batch_size you were given?"),
        "not-shuffled": Requirement(
            "the loader shuffles",
            hint="Print the first batch's indices: 0, 1, 2, ...? Something has to ask the loader to shuffle."),
        "not-reproducible": Requirement(
            "the same seed gives the same sequence of epochs whatever the global RNG did",
            hint="Build two loaders with the same seed after torch.manual_seed(1) and torch.manual_seed(2): "
            "which generator does your shuffling draw from?"),
        "seeds-global-rng": Requirement(
            "the order comes from the loader's own generator, not from re-seeding the global RNG (the lesson's "
            "pitfall)",
            hint="torch.manual_seed(seed) holds only until the next random draw: build your loader, call "
            "torch.randn(3) as a model's initialisation would, then look at the first epoch."),
        "same-order-every-epoch": Requirement(
            "each epoch has a new order",
            hint="Compare two epochs of the same loader: a permutation drawn once, or a generator re-seeded each "
            "epoch, repeats the order."),
        "seed-ignored": Requirement(
            "different seeds give different orders",
            hint="Build loaders with seeds 0 and 1: where does `seed` reach the shuffling?"),
    },
)
def probe_seeded_loader(make_loader: Callable, *, case: Case) -> dict:
    """Record the batches of two epochs of two loaders built with the same seed (the global RNG reseeded
    differently before each, and drawn from between the second one's epochs, as a model's initialisation and
    dropout would) and of one epoch with the next seed; and the global RNG's seed after each build."""
    n, batch_size, seed = loader_setting(case)
    dataset = TensorDataset(torch.arange(n))
    # Inside fork_rng, so the student's own global RNG state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(1))
        first = make_loader(dataset, batch_size, seed)
        global_seeds = [torch.initial_seed()]
        first_epochs = [_epoch_batches(first), _epoch_batches(first)]
        torch.manual_seed(case.seeded(2))
        second = make_loader(dataset, batch_size, seed)
        global_seeds.append(torch.initial_seed())
        torch.randn(16)  # a model's initialisation after the loader was built
        second_epochs = [_epoch_batches(second)]
        torch.rand(8)  # dropout during the first epoch
        second_epochs.append(_epoch_batches(second))
        other = _epoch_batches(make_loader(dataset, batch_size, seed + 1))
    return {"first": first_epochs, "second": second_epochs, "other": other, "global_seeds": global_seeds}
