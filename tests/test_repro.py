"""harness.repro: seeding, deterministic mode, DataLoader worker seeding, RNG state capture and restore."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from harness.repro import capture_rng_state, make_generator, restore_rng_state, seed_everything, seed_worker


def draw() -> tuple[float, list[float], list[float], float, float]:
    """One draw from each global generator, including the Gaussian paths that cache a second value."""
    return (
        random.random(),
        np.random.rand(3).tolist(),
        torch.rand(3).tolist(),
        random.gauss(0.0, 1.0),
        float(np.random.randn()),
    )


@pytest.fixture
def restore_determinism_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Put torch's global determinism switches (and CUBLAS_WORKSPACE_CONFIG) back as they were."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored by monkeypatch at teardown
    saved = (
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.are_deterministic_algorithms_enabled(),
    )
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[0], saved[1]
    torch.use_deterministic_algorithms(saved[2])


def test_same_seed_same_draws_different_seed_different_draws() -> None:
    seed_everything(123)
    first = draw()
    seed_everything(123)
    assert draw() == first
    seed_everything(124)
    other = draw()
    for a, b in zip(first, other, strict=True):
        assert a != b


def test_seeding_makes_a_model_init_and_training_step_reproducible() -> None:
    def one_step() -> torch.Tensor:
        seed_everything(7)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
        loss = model(torch.randn(16, 4)).pow(2).mean()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    assert torch.equal(one_step(), one_step())


@pytest.mark.usefixtures("restore_determinism_flags")
def test_deterministic_mode_sets_every_switch_and_off_clears_them() -> None:
    seed_everything(0, deterministic=True)
    assert torch.backends.cudnn.deterministic is True
    assert torch.backends.cudnn.benchmark is False
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
    seed_everything(0, deterministic=False)
    assert torch.backends.cudnn.deterministic is False
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.usefixtures("restore_determinism_flags")
def test_deterministic_mode_keeps_benchmark_off_until_the_user_turns_it_on() -> None:
    torch.backends.cudnn.benchmark = True
    seed_everything(0, deterministic=False)
    assert torch.backends.cudnn.benchmark is True, "non-deterministic seeding leaves the user's choice alone"
    seed_everything(0, deterministic=True)
    assert torch.backends.cudnn.benchmark is False


class WorkerDraws(Dataset):
    """Each item: the worker that produced it, and one draw from NumPy, `random` and torch in that worker."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, float, float, float]:
        info = get_worker_info()
        return info.id, float(np.random.rand()), random.random(), float(torch.rand(()))


def worker_draws(seed: int) -> list[tuple[int, float, float, float]]:
    """All items of a 2-worker DataLoader whose shuffling and worker seeds come from `seed`."""
    loader = DataLoader(
        WorkerDraws(), batch_size=None, num_workers=2, worker_init_fn=seed_worker, generator=make_generator(seed)
    )
    return [tuple(float(x) for x in item) for item in loader]


@pytest.mark.slow
def test_seed_worker_gives_each_worker_its_own_reproducible_stream() -> None:
    run = worker_draws(seed=3)
    by_worker = {worker: [item[1:] for item in run if item[0] == worker] for worker in (0, 1)}
    assert len(by_worker[0]) == len(by_worker[1]) == 4
    for generator in range(3):  # numpy, random, torch: no value shared between the two workers
        assert not {d[generator] for d in by_worker[0]} & {d[generator] for d in by_worker[1]}
    assert worker_draws(seed=3) == run
    assert worker_draws(seed=4) != run


def test_captured_state_survives_a_weights_only_checkpoint(tmp_path) -> None:
    seed_everything(11)
    draw()  # leaves a cached Gaussian in `random` and NumPy: part of the state that must round-trip
    random.gauss(0.0, 1.0)
    np.random.randn()
    path = tmp_path / "rng.pt"
    torch.save({"rng": capture_rng_state()}, path)
    expected = [draw() for _ in range(3)]

    seed_everything(999)  # move every generator somewhere else
    draw()
    restore_rng_state(torch.load(path, weights_only=True)["rng"])
    assert [draw() for _ in range(3)] == expected


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_captured_state_includes_cuda(tmp_path) -> None:
    seed_everything(5)
    torch.rand(1, device="cuda")  # initialises CUDA, so its generator is captured
    path = tmp_path / "rng.pt"
    torch.save(capture_rng_state(), path)
    expected = torch.rand(4, device="cuda")
    torch.rand(4, device="cuda")
    restore_rng_state(torch.load(path, weights_only=True))
    assert torch.equal(torch.rand(4, device="cuda"), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.usefixtures("restore_determinism_flags")
def test_deterministic_mode_gives_bitwise_identical_gpu_gradients() -> None:
    def gradients() -> torch.Tensor:
        seed_everything(0, deterministic=True)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 3)).cuda()
        model(torch.randn(8, 3, 32, 32, device="cuda")).square().mean().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    assert torch.equal(gradients(), gradients())
