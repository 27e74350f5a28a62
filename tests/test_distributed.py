"""harness.distributed: the helpers in a single process, and on 2 real gloo ranks (forked)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from harness import distributed as hd
from harness.launch import launch_forked


def test_single_process_is_rank_0_of_a_world_of_1():
    assert (hd.is_distributed(), hd.get_rank(), hd.get_world_size(), hd.is_main_process()) == (False, 0, 1, True)
    value = torch.tensor([1.0, 2.0])
    reduced = hd.all_reduce_sum(value)
    assert torch.equal(reduced, value) and reduced is not value
    hd.barrier()  # a no-op, must not raise


def test_default_backend_follows_the_device():
    assert hd.default_backend("cpu") == "gloo"
    assert hd.default_backend(torch.device("cuda", 0)) == "nccl"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="'gloo'.*'nccl'"):
        hd.check_backend("mpi")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_is_a_clear_error():
    with pytest.raises(RuntimeError, match="nccl' needs CUDA GPUs"):
        hd.check_backend("nccl")


def test_init_distributed_outside_torchrun_runs_one_process(monkeypatch):
    for name in hd.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    device = hd.init_distributed()
    assert device.type in ("cpu", "cuda") and not hd.is_distributed()


def test_init_distributed_names_missing_torchrun_variables(monkeypatch):
    for name in hd.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="LOCAL_RANK, MASTER_ADDR, MASTER_PORT missing"):
        hd.init_distributed()


def test_distributed_loader_in_one_process_reads_everything_and_reshuffles_per_epoch():
    loader = hd.distributed_loader(TensorDataset(torch.arange(20)), batch_size=4, seed=3)
    first = torch.cat([batch for (batch,) in loader]).tolist()
    loader.sampler.set_epoch(1)
    second = torch.cat([batch for (batch,) in loader]).tolist()
    assert sorted(first) == list(range(20)) and first != second
    with pytest.raises(ValueError, match="positive number of samples per rank"):
        hd.distributed_loader(TensorDataset(torch.arange(4)), batch_size=0)


def _rank_report() -> dict:
    loader = hd.distributed_loader(TensorDataset(torch.arange(10)), batch_size=2, seed=1)
    rank_value = torch.tensor([float(hd.get_rank() + 1)])
    return {
        "rank": hd.get_rank(),
        "world": hd.get_world_size(),
        "main": hd.is_main_process(),
        "shard": torch.cat([batch for (batch,) in loader]).tolist(),
        "mean": hd.all_reduce_sum(rank_value) / hd.get_world_size(),
        "sum": hd.all_reduce_sum(rank_value),
        "untouched": rank_value,
    }


@pytest.mark.slow
def test_helpers_on_two_gloo_ranks():
    reports = launch_forked(_rank_report, 2).results
    assert [(r["rank"], r["world"], r["main"]) for r in reports] == [(0, 2, True), (1, 2, False)]
    assert set(reports[0]["shard"]).isdisjoint(reports[1]["shard"])
    assert sorted(reports[0]["shard"] + reports[1]["shard"]) == list(range(10))
    for rank, report in enumerate(reports):
        assert report["mean"].item() == 1.5 and report["sum"].item() == 3.0
        assert report["untouched"].item() == rank + 1
