"""Test-wide settings: headless plots, one torch thread per xdist worker, GPU tests skipped without a GPU; and
`--cpu-profile FOLDER`, which writes each test's CPU seconds (its own and its finished child processes') and wall
seconds to FOLDER/<pid>.tsv: where the suite's time goes, measured even on a loaded machine."""

import os
import resource
import time
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
# Notebook kernels and torchrun ranks are separate processes: two threads each on two shared cores thrash.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# Two xdist workers share two cores: one intra-op thread each avoids oversubscription.
torch.set_num_threads(1)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering, which this keeps within each module
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = slow_modules_first(items)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)


def slow_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with the modules that hold a `slow` test first, each module's tests together and in their order.

    xdist's `--dist loadgroup` hands out the xdist groups first (most tests first), then single tests in this
    order: the seconds-long ones start early and the quick ones fill the end, so the two workers finish
    together instead of one waiting on the other's last notebook."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    return sorted(items, key=lambda item: item.path not in slow)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile", metavar="FOLDER", default=None,
                     help="write each test's CPU and wall seconds to FOLDER/<pid>.tsv (the suite's budget)")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    folder = item.config.getoption("--cpu-profile")
    if folder is None:
        yield
        return
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{os.getpid()}.tsv", "a") as out:
        out.write(f"{item.nodeid}\t{_cpu_seconds() - cpu:.2f}\t{time.monotonic() - wall:.2f}\n")
