"""The judge side of the repro drills (`harness.drills.bank.repro`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.repro import (
    LOADER_STARTER,
    SPLIT_MODEL_STARTER,
    WIDTHS,
    loader_inputs,
    rng_draws,
    seed_everything,
    split_configs,
    split_model_inputs,
    worker_inputs,
)
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _judge_split(seen: dict, *, case: Case) -> str:
    results = seen["results"]
    if not isinstance(results, list) or len(results) != len(split_configs(case)):
        malformed("the observation is not one the probe writes")
    for (n, fraction, seed), result in zip(split_configs(case), results, strict=True):
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


def _judge_generator_loader(seen: dict, *, case: Case) -> str:
    dataset, _ = loader_inputs(case)
    orders = seen["orders"]
    if not (isinstance(orders, list) and len(orders) == 2 and all(isinstance(o, list) and len(o) == 2 and all(
            _int_list(e) for e in o) for o in orders)):
        malformed("orders")
    for run in orders:
        for order in run:
            if sorted(order) != list(range(len(dataset))):
                fail("wrong-samples", observed=f"an epoch yielded {len(order)} samples, {len(set(order))} distinct",
                     expected=f"each of the {len(dataset)} samples once per epoch", cause="a sampler with "
                     "replacement, or drop_last",
                     where="the DataLoader's arguments")
    if orders[0][0] == sorted(orders[0][0]) and orders[0][1] == sorted(orders[0][1]):
        fail("not-shuffled", observed="the samples come in their stored order", expected="a shuffled order",
             cause="shuffle=False: a fixed order is reproducible but trains on the same sequence every epoch",
             where="the DataLoader's shuffle argument")
    if orders[0] != orders[1]:
        fail("global-rng-shuffle", observed="the same seed gave different orders after unrelated random draws",
             expected="orders fixed by the seed alone", cause="shuffle=True draws from torch's global RNG",
             where="make_loader: where the loader's randomness comes from")
    if seen["touched"] is not False:
        fail("reseeds-global-rng", observed="building or iterating the loader changed torch's global RNG",
             expected="the loader's randomness kept apart from everything else", cause="torch.manual_seed inside "
             "make_loader resets every other random stream too (dropout, initialisation, augmentation)",
             where="make_loader: where the loader's randomness comes from")
    if orders[0][0] == orders[0][1]:
        fail("same-order-every-epoch", observed="epochs 1 and 2 share one order", expected="a new order each epoch",
             cause="the generator is re-seeded each epoch", where="where the generator is created")
    if seen["other_seed"] == orders[0][0]:
        fail("seed-ignored", observed="another seed gives the same order", expected="the order set by the seed",
             cause="the seed is not used: an unseeded torch.Generator() always starts from the same default seed",
             where="what the seed argument reaches")
    return "the order depends on the seed alone, changes between epochs, and the global RNG is left alone"


def _caller_draws(case: Case) -> dict[str, float]:
    """The draws the caller's global RNGs give after make_loader when it leaves them alone (its seeds: 10-12)."""
    generator = torch.Generator().manual_seed(case.seeded(12))
    return {"torch": torch.rand((), dtype=torch.float64, generator=generator).item(),
            "numpy": float(np.random.RandomState(case.seeded(11) % 2**32).random_sample()),
            "random": random.Random(case.seeded(10)).random()}


def _judge_workers(seen: dict, *, case: Case) -> str:
    n, _ = worker_inputs(case)
    runs = [seen["first"], seen["second"], seen["other_seed"]]
    for run, count in zip(runs, (2, 1, 1), strict=True):
        if not isinstance(run, list) or len(run) != count or not all(
                isinstance(e, torch.Tensor) and e.shape == (n, 2) for e in run):
            malformed("epochs")
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
        malformed("draws after the call")
    changed = [name for name in want if after[name] != want[name]]
    if changed:
        fail("caller-rng-changed", observed=f"after make_loader returned, the caller's {', '.join(changed)} global "
             f"RNG gave {', '.join(f'{after[n]:.6f}' for n in changed)} where the state it was in before gives "
             f"{', '.join(f'{want[n]:.6f}' for n in changed)}", expected="the caller's RNGs left as they were",
             cause="make_loader reseeds (or draws from) the process's global RNG (torch.manual_seed, np.random.seed, "
             "random.seed): every later draw of the caller (initialisation, dropout, its own shuffles) is reset "
             "behind its back", where="seed the loader only: DataLoader(..., generator=torch.Generator()"
             ".manual_seed(seed)), and the workers in worker_init_fn")
    if not same_values(seen["first"][0], seen["second"][0], dtype=False):
        fail("not-reproducible", observed="the same seed gave other batches (order or noise) after the main "
             "process's RNGs changed", expected="batches fixed by the seed alone",
             cause="the shuffling and the workers' base seed come from torch's global RNG", where="DataLoader(..., "
             "generator=torch.Generator().manual_seed(seed))")
    if set(noise) & set(seen["first"][1][:, 1].tolist()):
        fail("same-noise-every-epoch", observed="epochs 1 and 2 draw the same augmentation noise",
             expected="new noise every epoch", cause="the workers' seed is a constant (seed + worker_id): workers "
             "restart each epoch and replay it", where="derive it from get_worker_info().seed (or "
             "torch.initial_seed()), which the loader's generator changes every epoch")
    if same_values(seen["first"][0], seen["other_seed"][0], dtype=False):
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


def _reference_model(hidden: int, seed: int) -> tuple[nn.Module, torch.Tensor]:
    """The model as the experiment initialises it, and the global RNG state right after."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    return model, torch.get_rng_state()


def _judge_split_model(seen: dict, *, case: Case) -> str:
    dataset, seed = split_model_inputs(case)
    n, runs = len(dataset), seen["runs"]
    if not isinstance(runs, list) or len(runs) != len(WIDTHS):
        malformed("runs")
    for hidden, run in zip(WIDTHS, runs, strict=True):
        train, val = run["train"], run["val"]
        if not (_int_list(train) and _int_list(val)) or sorted(train + val) != list(range(n)) or len(val) != n // 5:
            fail("wrong-split", observed=f"hidden={hidden}: a split of {describe(train)} and {describe(val)}",
                 expected=f"train and validation subsets covering the {n} samples once, {n // 5} for validation",
                 cause="the split's sizes or its return values changed", where="random_split and the return statement")
        model, rng_after = _reference_model(hidden, seed)
        want = [p.detach() for p in model.parameters()]
        params = run["params"]
        if not (isinstance(params, list) and len(params) == len(want) and all(
                isinstance(p, torch.Tensor) and p.shape == w.shape and same_values(p, w, dtype=False)
                for p, w in zip(params, want, strict=True))):
            fail("model-init-changed", observed=f"hidden={hidden}: the model's initial weights changed",
                 expected="the initialisation the experiment had: torch.manual_seed(seed), then the model",
                 cause="the split now draws from the global RNG before the model is built: every weight shifts, and "
                 "the split still depends on what runs before it", where="the random draws between building the model "
                 "and the split")
        run["rng_expected"] = rng_after
    if runs[0]["val"] != runs[1]["val"]:
        fail("split-moves-with-model", observed=f"hidden={WIDTHS[0]} and hidden={WIDTHS[1]} validate on "
             "different samples", expected="the same validation set whatever the model",
             cause="random_split draws from the global RNG after the model's initialisation, which consumes a "
             "number of random values that depends on the width", where="the randomness random_split "
             "draws from")
    for hidden, run in zip(WIDTHS, runs, strict=True):
        if not isinstance(run["rng"], torch.Tensor) or not same_values(run["rng"], run["rng_expected"], dtype=False):
            fail("uses-global-rng", observed=f"hidden={hidden}: torch's global RNG after prepare() is not where the "
                 "model's initialisation left it", expected="the split drawn without touching the global RNG",
                 cause="torch.manual_seed(seed) again before random_split: the split is stable, but dropout and "
                 "augmentation now replay the same stream as the initialisation", where="the randomness random_split "
                 "draws from")
    if seen["other_seed"] == runs[0]["val"]:
        fail("seed-ignored", observed="another seed gives the same validation set", expected="a split set by the seed",
             cause="an unseeded torch.Generator() always starts from the same default seed",
             where="what the seed argument reaches")
    return "the validation set is fixed by the seed alone, and the model's initialisation is untouched"


_SPLIT_MODEL_SOLUTION = edited(SPLIT_MODEL_STARTER,
                               ("[len(dataset) - n_val, n_val])",
                                "[len(dataset) - n_val, n_val],\n"
                                "                                      generator=torch.Generator().manual_seed(seed))"))


_STREAMS = {"python": "Python's random (random.getstate / setstate)",
            "numpy": "NumPy's global RNG (np.random.get_state / set_state)",
            "torch": "torch's CPU RNG (torch.get_rng_state / set_rng_state)",
            "generator": "the data's torch.Generator (generator.get_state / set_state)"}


def _judge_rng(seen: dict, *, case: Case) -> str:
    generator = torch.Generator()
    seed_everything(case, 0, generator)
    rng_draws(generator)
    want = rng_draws(generator)

    def same(got: Any, expected: Any) -> bool:
        if isinstance(expected, torch.Tensor):
            return same_values(got, expected, dtype=False)
        return got == expected

    for name in ("first", "replay"):
        if not isinstance(seen[name], dict) or set(seen[name]) != set(_STREAMS):
            malformed("draws")
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


add_answers(
    Answers(
        drill_id="repro-seeded-split",
        solution=(
            "import torch\n\n\ndef split_indices(n, fraction, seed):\n"
            "    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))\n"
            "    n_val = int(n * fraction)\n    return order[n_val:], order[:n_val]\n"
        ),
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
        judge=_judge_split,
    )
)


add_answers(
    Answers(
        drill_id="repro-two-runs-differ",
        solution=edited(LOADER_STARTER,
                        ("shuffle=True)",
                         "shuffle=True,\n                      "
                         "generator=torch.Generator().manual_seed(seed))")),
        wrong_answers=(
            (edited(LOADER_STARTER,
                    ("    return DataLoader", "    torch.manual_seed(seed)\n    return DataLoader")),
             "reseeds-global-rng"),
            (edited(LOADER_STARTER, ("shuffle=True)", "shuffle=True, generator=torch.Generator())")), "seed-ignored"),
            (edited(LOADER_STARTER, ("shuffle=True)", "shuffle=False)")), "not-shuffled"),
        ),
        judge=_judge_generator_loader,
    )
)


add_answers(
    choice_answers(
        "repro-resume-data-order",
        options=(
            ("the generator's state (or the epoch, when orders come from seed + epoch)",
             "the generator advanced during epochs 1-3: restoring its state (generator.set_state) continues the "
             "sequence; orders derived from seed + epoch need only the epoch"),
            ("nothing: seeding a fresh generator with the same seed replays epoch 4's order",
             "a freshly seeded generator starts at epoch 1's order, not epoch 4's"),
            ("the dataset object itself, so that every sample keeps its position in the order",
             "the dataset does not change; the order comes from the sampler's generator"),
            ("the batch size and the number of workers, which together fix the order",
             "neither draws the permutation: the sampler's generator does"),
        ),
        key="a",
    )
)


add_answers(
    Answers(
        drill_id="repro-worker-seeds",
        solution=_WORKER_SOLUTION,
        wrong_answers=(
            (edited(_WORKER_SOLUTION, (", worker_init_fn=seed_worker", "")), "duplicate-worker-streams"),
            (edited(_WORKER_SOLUTION,
                    ("    info = get_worker_info()  # info.seed: the loader's base seed (new each epoch) + worker_id\n"
                     "    info.dataset.rng = np.random.default_rng(info.seed)\n",
                     "    np.random.seed(torch.initial_seed() % 2**32)  # the recipe for np.random's global RNG\n")),
             "duplicate-worker-streams"),
            (edited(_WORKER_SOLUTION,
                    ("np.random.default_rng(info.seed)", "np.random.default_rng(1234 + worker_id)")),
             "same-noise-every-epoch"),
            (edited(_WORKER_SOLUTION,
                    (",\n                      generator=torch.Generator().manual_seed(seed))", ")")),
             "not-reproducible"),
            (edited(_WORKER_SOLUTION, ("num_workers=2, worker_init_fn=seed_worker", "num_workers=0")), "no-workers"),
            (edited(_WORKER_SOLUTION,
                    ("    return DataLoader(", "    torch.manual_seed(seed)\n    return DataLoader("),
                    (",\n                      generator=torch.Generator().manual_seed(seed))", ")")),
             "caller-rng-changed"),
        ),
        judge=_judge_workers,
    )
)


add_answers(
    Answers(
        drill_id="repro-split-moves-with-model",
        solution=_SPLIT_MODEL_SOLUTION,
        wrong_answers=(
            (edited(SPLIT_MODEL_STARTER,
                    ("    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))\n",
                     ""),
                    ("    return model,",
                     "    model = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))\n"
                     "    return model,")),
             "model-init-changed"),
            (edited(SPLIT_MODEL_STARTER,
                    ("    train_set, val_set = random_split",
                     "    torch.manual_seed(seed)\n    train_set, val_set = random_split")),
             "uses-global-rng"),
            (edited(SPLIT_MODEL_STARTER,
                    ("[len(dataset) - n_val, n_val])",
                     "[len(dataset) - n_val, n_val], generator=torch.Generator())")),
             "seed-ignored"),
        ),
        judge=_judge_split_model,
    )
)


add_answers(
    Answers(
        drill_id="repro-rng-capture",
        solution=_RNG_SOLUTION,
        wrong_answers=(
            (edited(_RNG_SOLUTION,
                    (' "numpy": np.random.get_state(),', ""),
                    ('    np.random.set_state(state["numpy"])\n', "")), "numpy-not-restored"),
            (edited(_RNG_SOLUTION,
                    ('"generator": generator.get_state()', '"generator": generator'),
                    ('generator.set_state(state["generator"])',
                     'generator.set_state(state["generator"].get_state())')),
             "generator-not-restored"),
            (edited(_RNG_SOLUTION,
                    ('state = {"python": random.getstate(), ', "state = {"),
                    ('    random.setstate(state["python"])\n', "")), "python-not-restored"),
            (edited(_RNG_SOLUTION,
                    ('"torch": torch.get_rng_state()', '"torch": torch.seed()'),
                    ('torch.set_rng_state(state["torch"])', 'torch.manual_seed(state["torch"])')), "capture-draws"),
        ),
        judge=_judge_rng,
    )
)


add_answers(
    choice_answers(
        "repro-deterministic-algorithms",
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
    )
)
