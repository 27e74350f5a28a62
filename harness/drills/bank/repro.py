"""Drills on reproducibility: seeded splits and loaders that do not depend on the global RNG, worker seeds,
capturing and restoring RNG states, deterministic algorithms."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from harness.contract.case import Case
from harness.contract.wire import describe
from harness.drills.core import Drill, add
from harness.drills.support import explain


def _ints(value: Any) -> Any:
    """Indices as a list of ints (data), whatever the answer returned them as; else its description."""
    if isinstance(value, torch.Tensor) and value.dim() == 1:
        return [int(i) for i in value.tolist()]
    if isinstance(value, (list, tuple, range)) and all(isinstance(i, (int, torch.Tensor)) for i in value):
        return [int(i) for i in value]
    return describe(value)


# --- a seeded split ------------------------------------------------------------------------------------------

def split_configs(case: Case) -> list[tuple[int, float, int]]:
    """Three (dataset size, validation fraction, seed) settings of the seeded-split drill."""
    return [(100 + case.seeded(0) % 37, 0.2, case.seeded(1) % 10_000), (7 + case.seeded(2) % 5, 0.5, 3),
            (1000 + case.seeded(3) % 101, 0.1, case.seeded(4) % 10_000)]


def _probe_split(answer: dict, *, case: Case) -> dict:
    split, results = answer["split_indices"], []
    for k, (n, fraction, seed) in enumerate(split_configs(case)):
        before = torch.get_rng_state()
        train, val = split(n, fraction, seed)
        touched = not torch.equal(before, torch.get_rng_state())
        torch.manual_seed(case.seeded(100 + k))  # another global state must not change the result
        again = split(n, fraction, seed)[1]
        results.append({"train": _ints(train), "val": _ints(val), "touched": touched, "again": _ints(again),
                        "other_seed": _ints(split(n, fraction, seed + 1)[1])})
    return {"results": results}


add(
    Drill(
        id="repro-seeded-split",
        self_check=True,
        title="A reproducible split that leaves the global RNG alone",
        kind="write",
        topics=("repro", "data"),
        difficulty=1,
        prompt="Write split_indices(n, fraction, seed) -> (train, val) index tensors: disjoint, covering 0..n-1, "
        "val of size int(n * fraction), the same for the same seed whatever the global RNG state, and without "
        "changing the global RNG.",
        entry="split_indices",
        starter="import torch\n\n\ndef split_indices(n, fraction, seed):\n    raise NotImplementedError\n",
        hints=("torch.randperm accepts a generator.",
               "One permutation from torch.Generator().manual_seed(seed), sliced."),
        probe=_probe_split,
    )
)


# --- a loader shuffled by its own generator ------------------------------------------------------------------

LOADER_STARTER = '''import torch
from torch.utils.data import DataLoader


def make_loader(dataset, seed):
    """Symptom: two runs with the same seed shuffle differently when any other code drew random numbers first."""
    return DataLoader(dataset, batch_size=4, shuffle=True)
'''


def loader_inputs(case: Case) -> tuple[TensorDataset, int]:
    """A dataset of indices and the loader's seed."""
    return TensorDataset(torch.arange(24 + case.seeded(0) % 13)), case.seeded(1) % 10_000


def _probe_generator_loader(answer: dict, *, case: Case) -> dict:
    make_loader = answer["make_loader"]
    dataset, seed = loader_inputs(case)
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
        starter=LOADER_STARTER,
        hints=("Where does shuffle=True get its randomness?", "Give the DataLoader its own seeded torch.Generator."),
        probe=_probe_generator_loader,
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
    explain(
        id="repro-resume-data-order",
        title="Resuming the data order",
        topics=("repro", "checkpointing"),
        difficulty=2,
        question="A run with a seeded DataLoader generator is checkpointed after epoch 3 and resumed in a new "
        "process. What must the checkpoint hold for epoch 4 to see the same order as in the uninterrupted run?",
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


def worker_inputs(case: Case) -> tuple[int, int]:
    """(dataset size, seed) of the worker-seeding drill."""
    return 12 + case.seeded(0) % 5, case.seeded(1) % 10_000


def _probe_workers(answer: dict, *, case: Case) -> dict:
    make_loader = answer["make_loader"]
    n, seed = worker_inputs(case)
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
        hints=("Each worker gets a copy of the dataset. In what state is the copy of dataset.rng, in each worker?",
               "torch seeds each worker's global RNGs (torch, random, np.random) from the loader's base seed, not a "
               "Generator the dataset holds: replace it in a worker_init_fn.",
               "worker_init_fn: info = get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed); and a "
               "seeded generator= for the loader (it draws the base seed each epoch)."),
        probe=_probe_workers,
    )
)


# --- the split moves with the model --------------------------------------------------------------------------

WIDTHS = (8, 32)


def split_model_inputs(case: Case) -> tuple[TensorDataset, int]:
    """A dataset of indices and the split's seed, split alike whatever the model's width."""
    return TensorDataset(torch.arange(40 + case.seeded(0) % 23)), case.seeded(1) % 10_000


def _probe_split_model(answer: dict, *, case: Case) -> dict:
    dataset, seed = split_model_inputs(case)
    runs = []
    for hidden in WIDTHS:
        model, train_set, val_set = answer["prepare"](dataset, hidden, seed)
        runs.append({"params": [p.detach().clone() for p in model.parameters()], "rng": torch.get_rng_state(),
                     "train": _ints(getattr(train_set, "indices", train_set)),
                     "val": _ints(getattr(val_set, "indices", val_set))})
    other = answer["prepare"](dataset, WIDTHS[0], seed + 1)[2]
    return {"runs": runs, "other_seed": _ints(getattr(other, "indices", other))}


SPLIT_MODEL_STARTER = '''import torch
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
        starter=SPLIT_MODEL_STARTER,
        hints=("How many random numbers does initialising a wider model draw from the global RNG? What draws next?",
               "random_split accepts generator=: give it torch.Generator().manual_seed(seed)."),
        probe=_probe_split_model,
    )
)


# --- capturing and restoring RNG states ----------------------------------------------------------------------

def seed_everything(case: Case, base: int, generator: torch.Generator) -> None:
    """Seed Python's, NumPy's and torch's global streams and `generator`, from the case and `base`."""
    random.seed(case.seeded(base))
    np.random.seed(case.seeded(base + 1) % 2**32)
    torch.manual_seed(case.seeded(base + 2))
    generator.manual_seed(case.seeded(base + 3))


def rng_draws(generator: torch.Generator) -> dict:
    """A training step's random draws: augmentation (random, NumPy), dropout (torch), data order (generator)."""
    return {"python": [random.random() for _ in range(3)], "numpy": [float(v) for v in np.random.rand(3)],
            "torch": torch.rand(3, dtype=torch.float64),
            "generator": torch.rand(3, generator=generator, dtype=torch.float64)}


def _probe_rng(answer: dict, *, case: Case) -> dict:
    generator = torch.Generator()
    seed_everything(case, 0, generator)
    rng_draws(generator)  # the run so far
    state = answer["capture_rng"](generator)
    first = rng_draws(generator)
    seed_everything(case, 50, generator)  # a new process: every stream elsewhere
    answer["restore_rng"](state, generator)
    return {"first": first, "replay": rng_draws(generator)}


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
        hints=("Four libraries' streams (five with CUDA), each with its own get/set pair.",
               "random.getstate, np.random.get_state, torch.get_rng_state, generator.get_state; and the matching "
               "setters in restore_rng."),
        probe=_probe_rng,
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
    explain(
        id="repro-deterministic-algorithms",
        title="What does use_deterministic_algorithms(True) do?",
        topics=("repro", "performance"),
        difficulty=2,
        question="Two runs on the same GPU, with every seed fixed, still drift apart after a few hundred steps. "
        "What does torch.use_deterministic_algorithms(True) change?",
        hints=("Floating-point addition is not associative. Which GPU kernels add in an order that can change?",
               "The flag chooses kernels; it never seeds, and it fails loudly when it cannot keep its promise."),
        experiment=_deterministic_experiment,
    )
)
