"""03-seeded-loader, the judge.

make_loader(dataset, batch_size, seed): shuffled, same seed -> same epochs, epochs differ, other seed differs.
"""

from __future__ import annotations

from typing import Any, NoReturn

from harness.checks.lesson03.seeded_loader import loader_setting
from harness.contract.case import Case
from harness.contract.compare import malformed
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def _epoch(batches: Any) -> list[list[int]]:
    """A recorded epoch, validated: a list of batches of ints."""
    if not (isinstance(batches, list) and all(
            isinstance(b, list) and all(type(i) is int for i in b) for b in batches)):
        malformed("an epoch is a list of batches of item indices")
    return batches


@judges(
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
def judge_seeded_loader(seen: dict, *, case: Case) -> str:
    """make_loader(dataset, batch_size, seed): shuffled, same seed -> same epochs, epochs differ, other seed differs."""
    n, batch_size, seed = loader_setting(case)
    where = "your make_loader"
    first_batches, second_batches = ([_epoch(e) for e in seen[key]] for key in ("first", "second"))
    if len(first_batches) != 2 or len(second_batches) != 2:
        malformed("two epochs per loader")
    first_epochs = [[i for batch in epoch for i in batch] for epoch in first_batches]
    second_epochs = [[i for batch in epoch for i in batch] for epoch in second_batches]
    other = [i for batch in _epoch(seen["other"]) for i in batch]
    global_seeds = seen["global_seeds"]
    if not (isinstance(global_seeds, list) and len(global_seeds) == 2 and all(type(s) is int for s in global_seeds)):
        malformed("the global RNG's seed after each of the two builds")

    for epoch in (*first_epochs, *second_epochs, other):
        if sorted(epoch) != list(range(n)):
            fail(
                "drops-samples",
                observed=f"one epoch yielded {len(epoch)} items, {len(set(epoch))} distinct, of {n}",
                expected=f"each of the {n} items exactly once per epoch",
                cause="drop_last=True (the last, partial batch is lost), sampling with replacement, or a sampler "
            "that does not cover the dataset",
                where=where,
            )
    if len(first_batches[0][0]) != batch_size:
        fail(
            "wrong-batch-size",
            observed=f"the first batch has {len(first_batches[0][0])} item"
            f"{'' if len(first_batches[0][0]) == 1 else 's'}",
            expected=f"batch_size={batch_size}",
            cause="batch_size not passed to the DataLoader (its default is 1), or another value passed",
            where=where,
        )
    if first_epochs[0] == list(range(n)):
        fail(
            "not-shuffled",
            observed="the first epoch yields the items in dataset order 0, 1, 2, ...",
            expected="a shuffled order",
            cause="no shuffle=True and no RandomSampler: the default sampler reads in order",
            where=where,
        )
    if first_epochs != second_epochs:
        _judge_global_rng(global_seeds, seed, where)
    if first_epochs[0] == first_epochs[1]:
        fail(
            "same-order-every-epoch",
            observed="epoch 2 repeats the order of epoch 1",
            expected="a new order each epoch (still determined by the seed)",
            cause="a fixed permutation built once (e.g. sampler=randperm(...).tolist()), or a generator re-seeded "
            "at every epoch",
            where=where,
        )
    if other == first_epochs[0]:
        fail(
            "seed-ignored",
            observed=f"seeds {seed} and {seed + 1} give the same order",
            expected="different seeds give different orders",
            cause="the generator is seeded with a constant (or left at its default seed) instead of `seed`",
            where=where,
        )
    return f"{n} items in batches of {batch_size}: shuffled, reproducible from the seed alone, new order each epoch"


def _judge_global_rng(global_seeds: list[int], seed: int, where: str) -> NoReturn:
    """Two loaders built with the same seed differed: say whether make_loader had re-seeded the global RNG."""
    if seed in global_seeds:
        fail(
            "seeds-global-rng",
            observed=f"your make_loader re-seeded the global torch RNG with seed={seed} (torch.initial_seed() was "
            f"{seed} after it returned); the two loaders still gave different orders once something else (a "
            "model's initialisation, dropout) drew from the global RNG before or between their epochs",
            expected="the same seed gives the same sequence of epochs, whatever the global RNG did",
            cause="torch.manual_seed(seed) (or seed_everything(seed)) in make_loader with a shuffle that draws from "
            "the global RNG: the order holds only until the next random draw, the pitfall of section 3",
            where=where,
        )
    fail(
        "not-reproducible",
        observed="two loaders built with the same seed give different orders (the global torch RNG was seeded "
        "differently before each, and drawn from between the second one's epochs)",
        expected="the same seed gives the same sequence of epochs, whatever the global RNG did",
        cause="the shuffling draws from the global torch RNG: shuffle=True without generator=, or a sampler "
        "built without its own generator; or its generator is seeded from something other than `seed`",
        where=where,
    )
