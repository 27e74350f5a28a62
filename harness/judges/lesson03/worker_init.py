"""03-worker-init, the judge.

worker_init_fn reseeds the dataset's own generator: distinct across workers and epochs, reproducible.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson03.worker_init import worker_setting
from harness.contract.case import Case
from harness.contract.compare import malformed
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges


def _draws(values: Any, n: int) -> list[float]:
    """One recorded epoch, validated: a float per item."""
    if not (isinstance(values, list) and len(values) == n and all(type(v) is float for v in values)):
        malformed(f"an epoch is {n} noise values")
    return values


@judges(
    "03-worker-init", unjudged=("epochs/1/*",),  # the second epoch is only compared with the first
    hints=Hints(
        nudge="Inside a worker, torch.utils.data.get_worker_info() gives this worker's copy of the dataset and a "
        "seed that differs per worker and per epoch and follows the loader's generator. Replace the dataset's rng "
        "with a generator built from that seed.",
        concept="A forked worker starts as a copy of the main process, dataset and its generator included. PyTorch "
        "re-seeds torch, random and the global np.random in each worker, never a generator your dataset owns: "
        "that one must be replaced in the worker, from a seed that differs per worker and per epoch and still "
        "follows the loader's generator.",
        solution="`info = torch.utils.data.get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed)`. "
        "Do not seed from worker_id alone (same every epoch) or from time/PID (not reproducible).",
        section="4. Workers and random augmentation",
    ),
    requires={
        "duplicate-across-workers": Requirement(
            "each worker's dataset copy draws its own numbers (its `rng` attribute is replaced in the worker)",
            hint="The dataset draws from self.rng, which the workers copied from the main process: does your "
            "function give this worker's dataset copy a new generator in that very attribute?"),
        "same-every-epoch": Requirement(
            "the draws change from epoch to epoch",
            hint="Without persistent_workers, new workers start every epoch: is the number you seed with the same "
            "every time a worker with this id starts?"),
        "not-reproducible": Requirement(
            "the same loader seed reproduces the same draws",
            hint="Run the loader twice with the same generator seed: your seed must come from the loader (the "
            "worker's seed), not from the clock, the process id or OS entropy."),
    },
)
def judge_worker_init(seen: dict, *, case: Case) -> str:
    """worker_init_fn reseeds the dataset's own generator: distinct across workers and epochs, reproducible."""
    workers, n, _ = worker_setting(case)
    if not (isinstance(seen["epochs"], list) and len(seen["epochs"]) == 2):
        malformed("two epochs")
    epochs = [_draws(values, n) for values in seen["epochs"]]
    again = _draws(seen["again"], n)
    where = "your worker_init_fn"
    values = epochs[0]
    if len(set(values)) < len(values):
        fail(
            "duplicate-across-workers",
            observed=f"{len(values) - len(set(values))} of {len(values)} noise values in one epoch are repeats: "
            f"the {workers} workers draw the same sequence",
            expected="a different random draw for every item",
            cause="each forked worker starts from a copy of the dataset's rng, and PyTorch re-seeds torch, random "
            "and np.random only: the function does not replace this worker's dataset.rng, or replaces it from a "
            "seed that is the same in every worker",
            where=where,
        )
    if sorted(epochs[0]) == sorted(epochs[1]):
        fail(
            "same-every-epoch",
            observed="epoch 2 draws exactly the same noise values as epoch 1 (in another item order)",
            expected="new augmentations every epoch",
            cause="the generator is seeded from worker_id alone (or a constant): workers restart each epoch "
            "with the same seed. Use get_worker_info().seed, which changes every epoch",
            where=where,
        )
    if again != epochs[0]:
        fail(
            "not-reproducible",
            observed="two loaders with the same generator seed give different noise",
            expected="the same loader seed reproduces the same augmentations",
            cause="seeding from time, the process id or fresh OS entropy instead of get_worker_info().seed",
            where=where,
        )
    return (f"{workers} real workers, 2 epochs: no duplicates across workers or epochs, reproducible from the "
            "loader seed")
