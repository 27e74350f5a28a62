"""Drills on reproducibility: seeded splits and loaders that do not depend on the global RNG, worker seeds,
capturing and restoring RNG states, deterministic algorithms."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _ints(value: Any) -> Any:
    """Indices as a list of ints (data), whatever the answer returned them as; else its description."""
    if isinstance(value, torch.Tensor) and value.dim() == 1:
        return [int(i) for i in value.tolist()]
    if isinstance(value, (list, tuple, range)) and all(isinstance(i, (int, torch.Tensor)) for i in value):
        return [int(i) for i in value]
    return describe(value)


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


# --- a seeded split ------------------------------------------------------------------------------------------

def _split_configs(case: Case) -> list[tuple[int, float, int]]:
    return [(100 + case.seeded(0) % 37, 0.2, case.seeded(1) % 10_000), (7 + case.seeded(2) % 5, 0.5, 3),
            (1000 + case.seeded(3) % 101, 0.1, case.seeded(4) % 10_000)]


def _probe_split(answer: dict, *, case: Case) -> dict:
    split, results = answer["split_indices"], []
    for k, (n, fraction, seed) in enumerate(_split_configs(case)):
        before = torch.get_rng_state()
        train, val = split(n, fraction, seed)
        touched = not torch.equal(before, torch.get_rng_state())
        torch.manual_seed(case.seeded(100 + k))  # another global state must not change the result
        again = split(n, fraction, seed)[1]
        results.append({"train": _ints(train), "val": _ints(val), "touched": touched, "again": _ints(again),
                        "other_seed": _ints(split(n, fraction, seed + 1)[1])})
    return {"results": results}


def _judge_split(seen: dict, *, case: Case) -> str:
    results = seen["results"]
    if not isinstance(results, list) or len(results) != len(_split_configs(case)):
        raise WireError("malformed observation")
    for (n, fraction, seed), result in zip(_split_configs(case), results, strict=True):
        train, val = result["train"], result["val"]
        if not (_int_list(train) and _int_list(val)):
            fail("wrong-format", observed=f"split_indices returned {describe(train)}, {describe(val)}",
                 expected="two 1-D index tensors", cause="another type returned", where="return train, val")
        if result["touched"] is not False:
            fail("uses-global-rng", observed="split_indices changed torch's global RNG state",
                 expected="a private torch.Generator", cause="torch.manual_seed or torch.randperm(n) without "
                 "generator=: every later random draw (initialisation, dropout) now depends on the split",
                 where="torch.randperm(n, generator=torch.Generator().manual_seed(seed))")
        if set(train) & set(val) or sorted(train + val) != list(range(n)):
            fail("overlap-or-missing",
                 observed=f"n={n}: {len(set(train) & set(val))} shared indices, {n - len(set(train + val))} missing",
                 expected="disjoint splits covering 0..n-1", cause="two independent random draws",
                 where="one permutation, sliced in two")
        if len(val) != int(n * fraction):
            fail("wrong-size", observed=f"{len(val)} validation indices of {n}", expected=f"{int(n * fraction)}",
                 cause="rounding or slicing off", where="val size = int(n * fraction)")
        if result["again"] != val:
            fail("not-reproducible", observed="the same seed gave another split after other code drew random numbers",
                 expected="the same split", cause="the split depends on global state", where="seed a private generator")
        if result["other_seed"] == val:
            fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give the same split",
                 expected="the split set by the seed", cause="the seed argument is not used (a fixed seed, or an "
                 "unseeded torch.Generator(), which always starts from the same default seed)",
                 where="torch.Generator().manual_seed(seed)")
    return "disjoint, complete, reproducible, set by the seed, and the global RNG untouched"


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
        probe=_probe_split,
        judge=_judge_split,
        wrong_answers=(
            ("import torch\n\ndef split_indices(n, fraction, seed):\n    torch.manual_seed(seed)\n"
             "    order = torch.randperm(n)\n    k = int(n * fraction)\n    return order[k:], order[:k]\n",
             "uses-global-rng"),
            ("import torch\n\ndef split_indices(n, fraction, seed):\n    g = torch.Generator().manual_seed(seed)\n"
             "    k = int(n * fraction)\n"
             "    return torch.randperm(n, generator=g)[k:], torch.randperm(n, generator=g)[:k]\n",
             "overlap-or-missing"),
            ("import torch\n\ndef split_indices(n, fraction, seed):\n"
             "    order = torch.randperm(n, generator=torch.Generator())\n"
             "    k = int(n * fraction)\n    return order[k:], order[:k]\n", "seed-ignored"),
        ),
    )
)


# --- a loader shuffled by its own generator ------------------------------------------------------------------

_LOADER_STARTER = '''import torch
from torch.utils.data import DataLoader


def make_loader(dataset, seed):
    """Symptom: two runs with the same seed shuffle differently when any other code drew random numbers first."""
    return DataLoader(dataset, batch_size=4, shuffle=True)
'''


def _loader_inputs(case: Case) -> tuple[TensorDataset, int]:
    return TensorDataset(torch.arange(24 + case.seeded(0) % 13)), case.seeded(1) % 10_000


def _probe_generator_loader(answer: dict, *, case: Case) -> dict:
    make_loader = answer["make_loader"]
    dataset, seed = _loader_inputs(case)
    orders, touched = [], False

    def epoch(loader: Any) -> list[int]:
        return [int(i) for (batch,) in loader for i in batch]

    for other in (0, 1):
        torch.manual_seed(case.seeded(1000 + other))
        torch.rand(other + 1)  # unrelated code consuming random numbers
        before = torch.get_rng_state()
        loader = make_loader(dataset, seed)
        orders.append([epoch(loader), epoch(loader)])
        touched |= not torch.equal(before, torch.get_rng_state())
    return {"orders": orders, "touched": touched, "other_seed": epoch(make_loader(dataset, seed + 1))}


def _judge_generator_loader(seen: dict, *, case: Case) -> str:
    dataset, _ = _loader_inputs(case)
    orders = seen["orders"]
    if not (isinstance(orders, list) and len(orders) == 2 and all(isinstance(o, list) and len(o) == 2 and all(
            _int_list(e) for e in o) for o in orders)):
        raise WireError("malformed orders")
    for run in orders:
        for order in run:
            if sorted(order) != list(range(len(dataset))):
                fail("wrong-samples", observed=f"an epoch yielded {len(order)} samples, {len(set(order))} distinct",
                     expected=f"each of the {len(dataset)} samples once per epoch", cause="a sampler with "
                     "replacement, or drop_last",
                     where="DataLoader(dataset, batch_size=4, shuffle=True, generator=...)")
    if orders[0][0] == sorted(orders[0][0]) and orders[0][1] == sorted(orders[0][1]):
        fail("not-shuffled", observed="the samples come in their stored order", expected="a shuffled order",
             cause="shuffle=False: a fixed order is reproducible but trains on the same sequence every epoch",
             where="shuffle=True with a seeded generator")
    if orders[0] != orders[1]:
        fail("global-rng-shuffle", observed="the same seed gave different orders after unrelated random draws",
             expected="orders fixed by the seed alone", cause="shuffle=True draws from torch's global RNG",
             where="DataLoader(..., generator=torch.Generator().manual_seed(seed))")
    if seen["touched"] is not False:
        fail("reseeds-global-rng", observed="building or iterating the loader changed torch's global RNG",
             expected="the loader's randomness kept apart from everything else", cause="torch.manual_seed inside "
             "make_loader resets every other random stream too (dropout, initialisation, augmentation)",
             where="DataLoader(..., generator=torch.Generator().manual_seed(seed))")
    if orders[0][0] == orders[0][1]:
        fail("same-order-every-epoch", observed="epochs 1 and 2 share one order", expected="a new order each epoch",
             cause="the generator is re-seeded each epoch", where="create the generator once, with the loader")
    if seen["other_seed"] == orders[0][0]:
        fail("seed-ignored", observed="another seed gives the same order", expected="the order set by the seed",
             cause="the seed is not used: an unseeded torch.Generator() always starts from the same default seed",
             where="torch.Generator().manual_seed(seed)")
    return "the order depends on the seed alone, changes between epochs, and the global RNG is left alone"


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
        probe=_probe_generator_loader,
        judge=_judge_generator_loader,
        wrong_answers=(
            (_LOADER_STARTER.replace("    return DataLoader", "    torch.manual_seed(seed)\n    return DataLoader"),
             "reseeds-global-rng"),
            (_LOADER_STARTER.replace("shuffle=True)", "shuffle=True, generator=torch.Generator())"), "seed-ignored"),
            (_LOADER_STARTER.replace("shuffle=True)", "shuffle=False)"), "not-shuffled"),
        ),
    )
)


# --- resuming the data order ---------------------------------------------------------------------------------

def _generator_state_experiment() -> None:
    generator = torch.Generator().manual_seed(0)
    torch.randperm(5, generator=generator)
    state = generator.get_state()
    first = torch.randperm(5, generator=generator).tolist()
    generator.set_state(state)
    again = torch.randperm(5, generator=generator).tolist()
    fresh = torch.randperm(5, generator=torch.Generator().manual_seed(0)).tolist()
    print(f"epoch 2's order {first}; again after restoring the generator state: {again}; from a freshly seeded "
          f"generator: {fresh} (epoch 1's order)")
    print("a checkpoint taken mid-run must hold the data-order generator's state to resume the same order.")


add(
    multiple_choice(
        id="repro-resume-data-order",
        title="Resuming the data order",
        topics=("repro", "checkpointing"),
        difficulty=2,
        question="A run with a seeded DataLoader generator is checkpointed after epoch 3 and resumed in a new "
        "process. What must the checkpoint hold for epoch 4 to see the same order as in the uninterrupted run?",
        options=(
            ("the generator's state (or the epoch, when orders come from seed + epoch)",
             "the generator advanced during epochs 1-3: restoring its state (generator.set_state) continues the "
             "sequence; orders derived from seed + epoch need only the epoch"),
            ("nothing: seeding a fresh generator with the same seed replays epoch 4's order",
             "a freshly seeded generator starts at epoch 1's order, not epoch 4's"),
            ("the dataset object, so that every sample keeps its position in the order",
             "the dataset does not change; the order comes from the sampler's generator"),
            ("the batch size and the number of workers, which together fix the order",
             "neither draws the permutation: the sampler's generator does"),
        ),
        key="a",
        hints=("The generator advanced during epochs 1-3. A fresh one seeded again starts at epoch 1's order.",
               "Save generator.get_state(), restore it with set_state()."),
        experiment=_generator_state_experiment,
    )
)


# --- worker seeds --------------------------------------------------------------------------------------------

class _NoisyDataset(Dataset):
    """Sample i is (i, noise): augmentation noise drawn in __getitem__ (so in the workers) from the dataset's own
    NumPy Generator, created with the dataset, as many codebases do."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.rng = n, np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index), float(self.rng.random())], dtype=torch.float64)


def _worker_inputs(case: Case) -> tuple[int, int]:
    return 12 + case.seeded(0) % 5, case.seeded(1) % 10_000


def _probe_workers(answer: dict, *, case: Case) -> dict:
    make_loader = answer["make_loader"]
    n, seed = _worker_inputs(case)
    dataset = _NoisyDataset(n, case.seeded(2))

    def parent_state(base: int) -> None:  # whatever the main process did before
        random.seed(case.seeded(base))
        np.random.seed(case.seeded(base + 1) % 2**32)
        torch.manual_seed(case.seeded(base + 2))

    def epochs(loader: Any, count: int) -> list[torch.Tensor]:
        return [torch.cat(list(loader)) for _ in range(count)]

    parent_state(10)
    loader = make_loader(dataset, seed)
    after = {"torch": torch.rand((), dtype=torch.float64).item(), "numpy": float(np.random.random()),
             "random": random.random()}  # the caller's next draws: what its RNGs give after the call
    workers = getattr(loader, "num_workers", None)
    first = epochs(loader, 2)
    parent_state(20)
    second = epochs(make_loader(dataset, seed), 1)
    other_seed = epochs(make_loader(dataset, seed + 1), 1)
    return {"workers": workers, "first": first, "second": second, "other_seed": other_seed, "after": after}


def _caller_draws(case: Case) -> dict[str, float]:
    """The draws the caller's global RNGs give after make_loader when it leaves them alone (its seeds: 10-12)."""
    generator = torch.Generator().manual_seed(case.seeded(12))
    return {"torch": torch.rand((), dtype=torch.float64, generator=generator).item(),
            "numpy": float(np.random.RandomState(case.seeded(11) % 2**32).random_sample()),
            "random": random.Random(case.seeded(10)).random()}


def _judge_workers(seen: dict, *, case: Case) -> str:
    n, _ = _worker_inputs(case)
    runs = [seen["first"], seen["second"], seen["other_seed"]]
    for run, count in zip(runs, (2, 1, 1), strict=True):
        if not isinstance(run, list) or len(run) != count or not all(
                isinstance(e, torch.Tensor) and e.shape == (n, 2) for e in run):
            raise WireError("malformed epochs")
        for epoch in run:
            if sorted(int(i) for i in epoch[:, 0]) != list(range(n)):
                fail("wrong-samples", observed="an epoch does not hold every sample once", expected=f"{n} samples",
                     cause="a sampler with replacement, or drop_last", where="the DataLoader's arguments")
    if not isinstance(seen["workers"], int) or seen["workers"] < 2:
        fail("no-workers", observed=f"the loader has num_workers={seen['workers']}", expected="2 worker processes",
             cause="loading in the main process hides the worker-seeding problem and gives up parallel loading",
             where="DataLoader(..., num_workers=2, worker_init_fn=..., generator=...)")
    noise = seen["first"][0][:, 1].tolist()
    if len(set(noise)) < n:
        fail("duplicate-worker-streams", observed=f"{n - len(set(noise))} samples of one epoch got exactly the same "
             "noise as another sample", expected="independent noise for every sample",
             cause="each worker gets a copy of the dataset, its NumPy Generator included, in the same state: both "
             "workers draw the same sequence. torch re-seeds each worker's torch, random and np.random global "
             "RNGs, never a Generator the dataset holds", where="a worker_init_fn that replaces the worker's "
             "dataset.rng: get_worker_info().dataset.rng = np.random.default_rng(get_worker_info().seed)")
    after, want = seen["after"], _caller_draws(case)
    if not isinstance(after, dict) or set(after) != set(want):
        raise WireError("malformed draws after the call")
    changed = [name for name in want if after[name] != want[name]]
    if changed:
        fail("caller-rng-changed", observed=f"after make_loader returned, the caller's {', '.join(changed)} global "
             f"RNG gave {', '.join(f'{after[n]:.6f}' for n in changed)} where the state it was in before gives "
             f"{', '.join(f'{want[n]:.6f}' for n in changed)}", expected="the caller's RNGs left as they were",
             cause="make_loader reseeds (or draws from) the process's global RNG (torch.manual_seed, np.random.seed, "
             "random.seed): every later draw of the caller (initialisation, dropout, its own shuffles) is reset "
             "behind its back", where="seed the loader only: DataLoader(..., generator=torch.Generator()"
             ".manual_seed(seed)), and the workers in worker_init_fn")
    if not torch.equal(seen["first"][0], seen["second"][0]):
        fail("not-reproducible", observed="the same seed gave other batches (order or noise) after the main "
             "process's RNGs changed", expected="batches fixed by the seed alone",
             cause="the shuffling and the workers' base seed come from torch's global RNG", where="DataLoader(..., "
             "generator=torch.Generator().manual_seed(seed))")
    if set(noise) & set(seen["first"][1][:, 1].tolist()):
        fail("same-noise-every-epoch", observed="epochs 1 and 2 draw the same augmentation noise",
             expected="new noise every epoch", cause="the workers' seed is a constant (seed + worker_id): workers "
             "restart each epoch and replay it", where="derive it from get_worker_info().seed (or "
             "torch.initial_seed()), which the loader's generator changes every epoch")
    if torch.equal(seen["first"][0], seen["other_seed"][0]):
        fail("seed-ignored", observed="another seed gives the same batches", expected="batches set by the seed",
             cause="the seed is not used", where="torch.Generator().manual_seed(seed)")
    return "reproducible batches, noise included; independent streams per worker; new noise each epoch"


_WORKER_SOLUTION = '''import numpy as np
import torch
from torch.utils.data import DataLoader, get_worker_info


def seed_worker(worker_id):
    info = get_worker_info()  # info.seed: the loader's base seed (new each epoch) + worker_id
    info.dataset.rng = np.random.default_rng(info.seed)


def make_loader(dataset, seed):
    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=seed_worker,
                      generator=torch.Generator().manual_seed(seed))
'''

add(
    Drill(
        id="repro-worker-seeds",
        title="Seeding the DataLoader's workers",
        kind="write",
        topics=("repro", "data"),
        difficulty=2,
        prompt="The dataset draws augmentation noise in __getitem__ from its own NumPy Generator, dataset.rng "
        "(np.random.default_rng, created in its __init__). Write make_loader(dataset, seed) -> a DataLoader "
        "(batch_size=4, shuffled, num_workers=2) such that: the same seed gives the same batches, noise included, "
        "whatever state the main process's RNGs are in; no two samples get the same noise because their workers "
        "share a stream; each epoch draws new noise; the caller's global RNGs (torch, random, np.random) are left as "
        "they were.",
        entry="make_loader",
        starter="import numpy as np\nimport torch\nfrom torch.utils.data import DataLoader, get_worker_info\n\n\n"
        "def make_loader(dataset, seed):\n    raise NotImplementedError\n",
        solution=_WORKER_SOLUTION,
        hints=("Each worker gets a copy of the dataset. In what state is the copy of dataset.rng, in each worker?",
               "torch seeds each worker's global RNGs (torch, random, np.random) from the loader's base seed, not a "
               "Generator the dataset holds: replace it in a worker_init_fn.",
               "worker_init_fn: info = get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed); and a "
               "seeded generator= for the loader (it draws the base seed each epoch)."),
        probe=_probe_workers,
        judge=_judge_workers,
        wrong_answers=(
            (_WORKER_SOLUTION.replace(", worker_init_fn=seed_worker", ""), "duplicate-worker-streams"),
            (_WORKER_SOLUTION.replace(
                "    info = get_worker_info()  # info.seed: the loader's base seed (new each epoch) + worker_id\n"
                "    info.dataset.rng = np.random.default_rng(info.seed)\n",
                "    np.random.seed(torch.initial_seed() % 2**32)  # the recipe for np.random's global RNG\n"),
             "duplicate-worker-streams"),
            (_WORKER_SOLUTION.replace("np.random.default_rng(info.seed)", "np.random.default_rng(1234 + worker_id)"),
             "same-noise-every-epoch"),
            (_WORKER_SOLUTION.replace(",\n                      generator=torch.Generator().manual_seed(seed))", ")"),
             "not-reproducible"),
            (_WORKER_SOLUTION.replace("num_workers=2, worker_init_fn=seed_worker", "num_workers=0"), "no-workers"),
            (_WORKER_SOLUTION.replace("    return DataLoader(", "    torch.manual_seed(seed)\n    return DataLoader(")
             .replace(",\n                      generator=torch.Generator().manual_seed(seed))", ")"),
             "caller-rng-changed"),
        ),
    )
)


# --- the split moves with the model --------------------------------------------------------------------------

_WIDTHS = (8, 32)


def _split_model_inputs(case: Case) -> tuple[TensorDataset, int]:
    return TensorDataset(torch.arange(40 + case.seeded(0) % 23)), case.seeded(1) % 10_000


def _reference_model(hidden: int, seed: int) -> tuple[nn.Module, torch.Tensor]:
    """The model as the experiment initialises it, and the global RNG state right after."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    return model, torch.get_rng_state()


def _probe_split_model(answer: dict, *, case: Case) -> dict:
    dataset, seed = _split_model_inputs(case)
    runs = []
    for hidden in _WIDTHS:
        model, train_set, val_set = answer["prepare"](dataset, hidden, seed)
        runs.append({"params": [p.detach().clone() for p in model.parameters()], "rng": torch.get_rng_state(),
                     "train": _ints(getattr(train_set, "indices", train_set)),
                     "val": _ints(getattr(val_set, "indices", val_set))})
    other = answer["prepare"](dataset, _WIDTHS[0], seed + 1)[2]
    return {"runs": runs, "other_seed": _ints(getattr(other, "indices", other))}


def _judge_split_model(seen: dict, *, case: Case) -> str:
    dataset, seed = _split_model_inputs(case)
    n, runs = len(dataset), seen["runs"]
    if not isinstance(runs, list) or len(runs) != len(_WIDTHS):
        raise WireError("malformed runs")
    for hidden, run in zip(_WIDTHS, runs, strict=True):
        train, val = run["train"], run["val"]
        if not (_int_list(train) and _int_list(val)) or sorted(train + val) != list(range(n)) or len(val) != n // 5:
            fail("wrong-split", observed=f"hidden={hidden}: a split of {describe(train)} and {describe(val)}",
                 expected=f"train and validation subsets covering the {n} samples once, {n // 5} for validation",
                 cause="the split's sizes or its return values changed", where="random_split and the return statement")
        model, rng_after = _reference_model(hidden, seed)
        want = [p.detach() for p in model.parameters()]
        params = run["params"]
        if not (isinstance(params, list) and len(params) == len(want) and all(
                isinstance(p, torch.Tensor) and p.shape == w.shape and torch.equal(p, w)
                for p, w in zip(params, want, strict=True))):
            fail("model-init-changed", observed=f"hidden={hidden}: the model's initial weights changed",
                 expected="the initialisation the experiment had: torch.manual_seed(seed), then the model",
                 cause="the split now draws from the global RNG before the model is built: every weight shifts, and "
                 "the split still depends on what runs before it", where="keep the model where it was; give "
                 "random_split its own generator")
        run["rng_expected"] = rng_after
    if runs[0]["val"] != runs[1]["val"]:
        fail("split-moves-with-model", observed=f"hidden={_WIDTHS[0]} and hidden={_WIDTHS[1]} validate on "
             "different samples", expected="the same validation set whatever the model",
             cause="random_split draws from the global RNG after the model's initialisation, which consumes a "
             "number of random values that depends on the width", where="random_split(..., "
             "generator=torch.Generator().manual_seed(seed))")
    for hidden, run in zip(_WIDTHS, runs, strict=True):
        if not isinstance(run["rng"], torch.Tensor) or not torch.equal(run["rng"], run["rng_expected"]):
            fail("uses-global-rng", observed=f"hidden={hidden}: torch's global RNG after prepare() is not where the "
                 "model's initialisation left it", expected="the split drawn without touching the global RNG",
                 cause="torch.manual_seed(seed) again before random_split: the split is stable, but dropout and "
                 "augmentation now replay the same stream as the initialisation", where="random_split(..., "
                 "generator=torch.Generator().manual_seed(seed))")
    if seen["other_seed"] == runs[0]["val"]:
        fail("seed-ignored", observed="another seed gives the same validation set", expected="a split set by the seed",
             cause="an unseeded torch.Generator() always starts from the same default seed",
             where="torch.Generator().manual_seed(seed)")
    return "the validation set is fixed by the seed alone, and the model's initialisation is untouched"


_SPLIT_MODEL_STARTER = '''import torch
from torch import nn
from torch.utils.data import random_split


def prepare(dataset, hidden, seed):
    """The model and the train/validation split of one experiment. Symptom: changing `hidden` changes which
    samples are in the validation set, so runs with different widths cannot be compared."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    n_val = len(dataset) // 5
    train_set, val_set = random_split(dataset, [len(dataset) - n_val, n_val])
    return model, train_set, val_set
'''
_SPLIT_MODEL_SOLUTION = _SPLIT_MODEL_STARTER.replace(
    "[len(dataset) - n_val, n_val])", "[len(dataset) - n_val, n_val],\n"
    "                                      generator=torch.Generator().manual_seed(seed))")

add(
    Drill(
        id="repro-split-moves-with-model",
        title="Bug hunt: the validation set changes with the model's width",
        kind="bughunt",
        topics=("repro", "data"),
        difficulty=2,
        prompt="prepare(dataset, hidden, seed) builds an experiment's model and its train/validation split. Runs "
        "with different widths validate on different samples, so their scores cannot be compared. Fix it without "
        "changing the model's initialisation (torch.manual_seed(seed), then the model) and without touching "
        "torch's global RNG for the split.",
        entry="prepare",
        starter=_SPLIT_MODEL_STARTER,
        solution=_SPLIT_MODEL_SOLUTION,
        hints=("How many random numbers does initialising a wider model draw from the global RNG? What draws next?",
               "random_split accepts generator=: give it torch.Generator().manual_seed(seed)."),
        probe=_probe_split_model,
        judge=_judge_split_model,
        wrong_answers=(
            (_SPLIT_MODEL_STARTER.replace(
                "    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))\n", "").replace(
                "    return model,",
                "    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))\n    return model,"),
             "model-init-changed"),
            (_SPLIT_MODEL_STARTER.replace("    train_set, val_set = random_split",
                                          "    torch.manual_seed(seed)\n    train_set, val_set = random_split"),
             "uses-global-rng"),
            (_SPLIT_MODEL_STARTER.replace("[len(dataset) - n_val, n_val])",
                                          "[len(dataset) - n_val, n_val], generator=torch.Generator())"),
             "seed-ignored"),
        ),
    )
)


# --- capturing and restoring RNG states ----------------------------------------------------------------------

def _seed_everything(case: Case, base: int, generator: torch.Generator) -> None:
    random.seed(case.seeded(base))
    np.random.seed(case.seeded(base + 1) % 2**32)
    torch.manual_seed(case.seeded(base + 2))
    generator.manual_seed(case.seeded(base + 3))


def _rng_draws(generator: torch.Generator) -> dict:
    """A training step's random draws: augmentation (random, NumPy), dropout (torch), data order (generator)."""
    return {"python": [random.random() for _ in range(3)], "numpy": [float(v) for v in np.random.rand(3)],
            "torch": torch.rand(3, dtype=torch.float64),
            "generator": torch.rand(3, generator=generator, dtype=torch.float64)}


def _probe_rng(answer: dict, *, case: Case) -> dict:
    generator = torch.Generator()
    _seed_everything(case, 0, generator)
    _rng_draws(generator)  # the run so far
    state = answer["capture_rng"](generator)
    first = _rng_draws(generator)
    _seed_everything(case, 50, generator)  # a new process: every stream elsewhere
    answer["restore_rng"](state, generator)
    return {"first": first, "replay": _rng_draws(generator)}


_STREAMS = {"python": "Python's random (random.getstate / setstate)",
            "numpy": "NumPy's global RNG (np.random.get_state / set_state)",
            "torch": "torch's CPU RNG (torch.get_rng_state / set_rng_state)",
            "generator": "the data's torch.Generator (generator.get_state / set_state)"}


def _judge_rng(seen: dict, *, case: Case) -> str:
    generator = torch.Generator()
    _seed_everything(case, 0, generator)
    _rng_draws(generator)
    want = _rng_draws(generator)

    def same(got: Any, expected: Any) -> bool:
        if isinstance(expected, torch.Tensor):
            return isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.equal(got, expected)
        return got == expected

    for name in ("first", "replay"):
        if not isinstance(seen[name], dict) or set(seen[name]) != set(_STREAMS):
            raise WireError("malformed draws")
    for stream, what in _STREAMS.items():
        if not same(seen["first"][stream], want[stream]):
            fail("capture-draws", observed=f"after capture_rng, {what} gave other numbers than without it",
                 expected="capturing leaves every stream where it was", cause="capture_rng draws a random number "
                 "(or re-seeds) instead of reading the state", where="get_state / getstate only")
    for stream, what in _STREAMS.items():
        if not same(seen["replay"][stream], want[stream]):
            fail(f"{stream}-not-restored", observed=f"after restore_rng, {what} does not replay the draws made "
                 "after capture_rng", expected="the same draws, in a process whose RNGs were elsewhere",
                 cause=f"{what} is not captured and restored" + (
                     ", or the generator object itself was kept instead of a copy of its state (it moved on)"
                     if stream == "generator" else ""), where=f"add {what.split('(')[1].rstrip(')')}")
    return "every stream (random, NumPy, torch, the data generator) replays exactly after restore_rng"


_RNG_SOLUTION = '''import random

import numpy as np
import torch


def capture_rng(generator):
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "generator": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state, generator):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
'''

add(
    Drill(
        id="repro-rng-capture",
        title="Capture and restore every random stream",
        kind="write",
        topics=("repro", "checkpointing"),
        difficulty=2,
        prompt="Write capture_rng(generator) -> state and restore_rng(state, generator): a snapshot of every random "
        "stream a training step draws from (Python's random, NumPy's global RNG, torch's CPU RNG, every CUDA "
        "device's RNG when CUDA is available, and the data's own torch.Generator), and its restoration, such "
        "that after restore_rng in a process whose RNGs are anywhere else, the next draws are exactly those that "
        "followed capture_rng. Capturing must not draw.",
        entry="restore_rng",
        starter="import random\n\nimport numpy as np\nimport torch\n\n\ndef capture_rng(generator):\n"
        "    raise NotImplementedError\n\n\ndef restore_rng(state, generator):\n    raise NotImplementedError\n",
        solution=_RNG_SOLUTION,
        hints=("Four libraries' streams (five with CUDA), each with its own get/set pair.",
               "random.getstate, np.random.get_state, torch.get_rng_state, generator.get_state; and the matching "
               "setters in restore_rng."),
        probe=_probe_rng,
        judge=_judge_rng,
        wrong_answers=(
            (_RNG_SOLUTION.replace(' "numpy": np.random.get_state(),', "").replace(
                '    np.random.set_state(state["numpy"])\n', ""), "numpy-not-restored"),
            (_RNG_SOLUTION.replace('"generator": generator.get_state()', '"generator": generator').replace(
                'generator.set_state(state["generator"])', 'generator.set_state(state["generator"].get_state())'),
             "generator-not-restored"),
            (_RNG_SOLUTION.replace('state = {"python": random.getstate(), ', "state = {").replace(
                '    random.setstate(state["python"])\n', ""), "python-not-restored"),
            (_RNG_SOLUTION.replace('"torch": torch.get_rng_state()', '"torch": torch.seed()').replace(
                'torch.set_rng_state(state["torch"])', 'torch.manual_seed(state["torch"])'), "capture-draws"),
        ),
    )
)


# --- deterministic algorithms --------------------------------------------------------------------------------

def _deterministic_experiment() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        print(f"deterministic algorithms on; two unseeded torch.rand(2) draws: {torch.rand(2).tolist()} and "
              f"{torch.rand(2).tolist()} (it seeds nothing)")
        try:
            torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
            print("put_ ran")
        except RuntimeError as error:
            print(f"Tensor.put_ (accumulate=False): RuntimeError: {str(error).split(',')[0]}")
    finally:
        torch.use_deterministic_algorithms(before)
    print("on CUDA it also makes cuDNN pick deterministic algorithms (and needs CUBLAS_WORKSPACE_CONFIG=:4096:8); "
          "cudnn.benchmark=False keeps the algorithm choice from varying run to run.")


add(
    multiple_choice(
        id="repro-deterministic-algorithms",
        title="What does use_deterministic_algorithms(True) do?",
        topics=("repro", "performance"),
        difficulty=2,
        question="Two runs on the same GPU, with every seed fixed, still drift apart after a few hundred steps. "
        "What does torch.use_deterministic_algorithms(True) change?",
        options=(
            ("it seeds Python, NumPy and torch on every device, like a global seed call",
             "it seeds nothing: seeding is torch.manual_seed and friends; this flag is about which kernels run"),
            ("ops use deterministic kernels, and an op that has none raises an error",
             "atomics-based kernels (scatter-add, some backward passes, cuDNN algorithms) can sum in a different "
             "order each run; the flag selects deterministic ones, and raises where none exists"),
            ("results become identical across GPU models, drivers and torch versions",
             "determinism holds for one hardware and software stack; another GPU or version may still differ"),
            ("it turns on cudnn.benchmark so that the fastest kernel is always chosen",
             "the opposite: benchmarking may pick a different algorithm each run; reproducible runs keep "
             "cudnn.benchmark=False"),
        ),
        key="b",
        hints=("Floating-point addition is not associative. Which GPU kernels add in an order that can change?",
               "The flag chooses kernels; it never seeds, and it fails loudly when it cannot keep its promise."),
        experiment=_deterministic_experiment,
    )
)
