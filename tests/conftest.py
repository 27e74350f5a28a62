"""Test-wide settings: headless plots, one torch thread per xdist worker, GPU tests skipped without a GPU."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
# Notebook kernels and torchrun ranks are separate processes: two threads each on two shared cores thrash.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# Two xdist workers share two cores: one intra-op thread each avoids oversubscription.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)
