"""Drills on reproducibility: seeded splits and loaders that do not depend on the global RNG."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _check_split(ns: dict) -> str:
    split = ns["split_indices"]
    for n, fraction, seed in ((100, 0.2, 0), (7, 0.5, 1), (1000, 0.1, 2)):
        before = torch.get_rng_state()
        train, val = split(n, fraction, seed)
        if not torch.equal(before, torch.get_rng_state()):
            fail("uses-global-rng", observed="split_indices changed torch's global RNG state",
                 expected="a private torch.Generator", cause="torch.randperm(n) without generator=",
                 where="torch.randperm(n, generator=torch.Generator().manual_seed(seed))")
        train, val = [int(i) for i in train], [int(i) for i in val]
        if set(train) & set(val) or sorted(train + val) != list(range(n)):
            fail("overlap-or-missing",
                 observed=f"{len(set(train) & set(val))} shared indices, {n - len(set(train + val))} missing",
                 expected="disjoint splits covering 0..n-1", cause="two independent random draws",
                 where="one permutation, sliced in two")
        if len(val) != int(n * fraction):
            fail("wrong-size", observed=f"{len(val)} validation indices of {n}", expected=f"{int(n * fraction)}",
                 cause="rounding or slicing off", where="val size = int(n * fraction)")
        torch.manual_seed(seed + 100)  # another global state must not change the result
        if [int(i) for i in split(n, fraction, seed)[1]] != val:
            fail("not-reproducible", observed="the same seed gave another split", expected="the same split",
                 cause="the split depends on global state", where="seed a private generator")
    return "disjoint, complete, reproducible, and the global RNG untouched"


add(
    Drill(
        id="repro-seeded-split",
        title="A reproducible split that leaves the global RNG alone",
        kind="write",
        topics=("repro", "data"),
        difficulty=1,
        prompt="Write split_indices(n, fraction, seed) -> (train, val) index tensors: disjoint, covering 0..n-1, "
        "val of size int(n * fraction), the same for the same seed whatever the global RNG state, and without "
        "changing the global RNG.",
        entry="split_indices",
        starter="import torch\n\n\ndef split_indices(n, fraction, seed):\n    raise NotImplementedError\n",
        solution=(
            "import torch\n\n\ndef split_indices(n, fraction, seed):\n"
            "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))\n"
            "    n_val = int(n * fraction)\n    return order[n_val:], order[:n_val]\n"
        ),
        hints=("torch.randperm accepts a generator.",
               "One permutation from torch.Generator().manual_seed(seed), sliced."),
        check=_check_split,
        wrong_answers=(
            "import torch\n\ndef split_indices(n, fraction, seed):\n    torch.manual_seed(seed)\n"
            "    order = torch.randperm(n)\n"
            "    k = int(n * fraction)\n    return order[k:], order[:k]\n",
            "import torch\n\ndef split_indices(n, fraction, seed):\n    g = torch.Generator().manual_seed(seed)\n"
            "    k = int(n * fraction)\n"
            "    return torch.randperm(n, generator=g)[k:], torch.randperm(n, generator=g)[:k]\n",
        ),
    )
)

_LOADER_STARTER = '''import torch
from torch.utils.data import DataLoader


def make_loader(dataset, seed):
    """Symptom: two runs with the same seed shuffle differently when any other code drew random numbers first."""
    return DataLoader(dataset, batch_size=4, shuffle=True)
'''


def _check_loader(ns: dict) -> str:
    make_loader = ns["make_loader"]
    dataset = TensorDataset(torch.arange(32))
    orders, touched_global = [], False
    for other in (0, 1):
        torch.manual_seed(1000 + other)
        torch.rand(other + 1)  # unrelated code consuming random numbers
        global_state = torch.get_rng_state()
        loader = make_loader(dataset, 7)
        orders.append([[int(i) for (b,) in loader for i in b] for _ in range(2)])
        touched_global |= not torch.equal(global_state, torch.get_rng_state())
    if orders[0] != orders[1]:
        fail("global-rng-shuffle", observed="the same seed gave different orders after unrelated random draws",
             expected="orders fixed by the seed alone", cause="shuffle=True draws from torch's global RNG",
             where="DataLoader(..., generator=torch.Generator().manual_seed(seed))")
    if touched_global:
        fail("reseeds-global-rng", observed="building or iterating the loader changed torch's global RNG",
             expected="the loader's randomness kept apart from everything else", cause="torch.manual_seed inside "
             "make_loader resets every other random stream too (dropout, initialisation, augmentation)",
             where="DataLoader(..., generator=torch.Generator().manual_seed(seed))")
    if orders[0][0] == orders[0][1]:
        fail("same-order-every-epoch", observed="epochs 1 and 2 share one order", expected="a new order each epoch",
             cause="the generator is re-seeded each epoch", where="create the generator once, with the loader")
    return "the order depends on the seed alone, and changes between epochs"


add(
    Drill(
        id="repro-two-runs-differ",
        title="Bug hunt: two runs with the same seed shuffle differently",
        kind="bughunt",
        topics=("repro", "data"),
        difficulty=1,
        prompt="make_loader(dataset, seed) should fix the shuffling order by its seed, but the order changes whenever "
        "any other code draws random numbers first. Fix it.",
        entry="make_loader",
        starter=_LOADER_STARTER,
        solution=_LOADER_STARTER.replace("shuffle=True)", "shuffle=True,\n                      "
                                         "generator=torch.Generator().manual_seed(seed))"),
        hints=("Where does shuffle=True get its randomness?", "Give the DataLoader its own seeded torch.Generator."),
        check=_check_loader,
        wrong_answers=(_LOADER_STARTER.replace("    return DataLoader",
                                               "    torch.manual_seed(seed)\n    return DataLoader"),),
    )
)


def _generator_state_experiment() -> None:
    generator = torch.Generator().manual_seed(0)
    torch.randperm(5, generator=generator)
    state = generator.get_state()
    first = torch.randperm(5, generator=generator).tolist()
    generator.set_state(state)
    again = torch.randperm(5, generator=generator).tolist()
    print(f"epoch order {first}, and again after restoring the generator state: {again}")
    print("a checkpoint taken mid-run must hold the data-order generator's state to resume the same order.")


add(
    multiple_choice(
        id="repro-resume-data-order",
        title="Resuming the data order",
        topics=("repro", "checkpointing"),
        difficulty=2,
        prompt="A run with a seeded DataLoader generator is checkpointed after epoch 3 and resumed in a new process. "
        "What must the checkpoint hold for epoch 4 to see the same order as in the uninterrupted run?\n"
        "  a) nothing: the seed is enough\n"
        "  b) the generator's state (or the epoch, if the order is derived from seed + epoch)\n"
        "  c) the dataset\n  d) the batch size only\n",
        correct="b",
        explanation="the generator advanced: save its state (or derive orders from seed + epoch)",
        hints=("The generator advanced during epochs 1-3. A fresh one seeded again starts at epoch 1's order.",
               "Save generator.get_state(), restore it with set_state()."),
        wrong=("a", "c"),
        experiment=_generator_state_experiment,
    )
)
