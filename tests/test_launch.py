"""harness.launch: real torchrun and forked launches, their results and logs, and every bad input.

torchrun launches cost several seconds each (an interpreter and torch per rank): they are few, marked
slow, and serialized in one xdist group so that two of them never share the two cores.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from harness.launch import LaunchError, function_script, hangs, launch, launch_forked, max_world_size
from harness.launch.outcome import blame

SCALE = 3


def scaled(x: float) -> float:
    return x * SCALE


def report_and_reduce(x: float) -> dict:
    import pandas as pd

    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"hello from rank {dist.get_rank()} of {dist.get_world_size()}")
    return {"sum": value, "scaled": scaled(x), "history": pd.DataFrame({"epoch": [1, 2], "loss": [0.5, 0.25]})}


def rank1_crashes() -> None:
    if dist.get_rank() == 1:
        raise ValueError("planted failure on rank 1")
    dist.barrier()  # rank 0 waits here for a peer that died: the launcher must end it


def hangs_forever() -> None:
    dist.barrier() if dist.get_rank() == 0 else time.sleep(600)


_EARLIER: set[int] = set()  # this process's children from before the test


@pytest.fixture(autouse=True)
def _children_from_earlier_tests() -> None:
    """Note the children this test process already had: another test's, not this launch's (a Dask
    LocalCluster leaves multiprocessing's resource tracker running for the life of the process)."""
    _EARLIER.clear()
    _EARLIER.update(p.pid for p in psutil.Process().children(recursive=True))


def assert_no_children_left() -> None:
    children = [p for p in psutil.Process().children(recursive=True) if p.pid not in _EARLIER]
    assert children == [], f"processes left behind: {children}"


# ---------------------------------------------------------------------------------------------- torchrun


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_launch_runs_a_notebook_style_function_on_two_ranks(capfd):
    result = launch(report_and_reduce, 2, args=(2.0,))
    assert [r["sum"].item() for r in result.results] == [3.0, 3.0]
    assert result.value["scaled"] == 6.0  # a helper and a constant from this module travelled with it
    assert result.value["history"]["loss"].tolist() == [0.5, 0.25]  # a DataFrame comes back as one
    out, err = capfd.readouterr()
    assert "[rank0] hello from rank 0 of 2" in out and "[rank1] hello from rank 1 of 2" in out
    assert err == ""  # streamed on stdout only: a graded notebook cell is not zeroed
    assert_no_children_left()


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_launch_reports_the_crashing_rank_and_ends_the_others():
    started = time.monotonic()
    with pytest.raises(LaunchError, match="rank 1 failed") as failure:
        launch(rank1_crashes, 2, timeout_s=60, quiet=True)
    assert failure.value.rank == 1
    assert "ValueError: planted failure on rank 1" in str(failure.value)
    assert time.monotonic() - started < 50  # ended on the failure, not on the timeout
    assert_no_children_left()


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_launch_timeout_ends_every_process():
    with pytest.raises(LaunchError, match="did not finish within 12 s"):
        launch(hangs_forever, 2, timeout_s=12, step_timeout_s=60, quiet=True)  # the launch's timeout comes first
    assert_no_children_left()


SCRIPT = """
import sys
import torch
from harness.distributed import (all_reduce_sum, cleanup_distributed, distributed_loader, get_rank,
                                 get_world_size, init_distributed, is_main_process)

device = init_distributed()  # from torchrun's environment
loader = distributed_loader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=2, seed=0)
local = torch.cat([x for (x,) in loader]).mean()
mean = all_reduce_sum(local) / get_world_size()
print(f"rank {get_rank()}/{get_world_size()} on {device}: shard mean {local.item():.2f}, global mean {mean.item():.2f}")
if is_main_process():
    with open(sys.argv[1], "w") as f:
        f.write(f"{mean.item():.2f}")
cleanup_distributed()
"""


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_harness_launch_command_runs_a_torchrun_script(tmp_path, capfd):
    from harness.launch import add_arguments, run

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--nproc", "2", str(script), "--", str(tmp_path / "mean.txt")])) == 0
    out, err = capfd.readouterr()
    assert "[rank0] rank 0/2 on cpu" in out and "[rank1] rank 1/2 on cpu" in out and err == ""
    assert (tmp_path / "mean.txt").read_text() == "3.50"  # the mean of 0..7, from both shards
    assert_no_children_left()


# ---------------------------------------------------------------------------------------------- bad input


def test_world_size_beyond_the_machine_is_refused():
    with pytest.raises(ValueError, match=f"it has {max_world_size('gloo')} CPU cores"):
        launch(report_and_reduce, max_world_size("gloo") + 1, backend="gloo")
    with pytest.raises(ValueError, match="positive number of processes"):
        launch(report_and_reduce, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_is_refused():
    with pytest.raises(RuntimeError, match="use backend='gloo' on CPU"):
        launch(report_and_reduce, 1, backend="nccl")


def test_a_port_in_use_is_refused():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} is already in use"):
            launch(report_and_reduce, 2, port=port)


def test_functions_that_cannot_be_sent_are_named(tmp_path):
    with pytest.raises(TypeError, match="is a lambda"):
        launch(lambda: None, 2)

    def outer(factor: int):
        def inner() -> int:
            return factor

        return inner

    with pytest.raises(TypeError, match="`test_functions_that_cannot_be_sent_are_named.<locals>.outer.<locals>.inner`"
                                        ".*captures factor"):
        launch(outer(2), 2)


def notebook_function(tmp_path, source: str, name: str):
    """Define `name` the way a notebook cell does: module __main__, source in a file linecache can read."""
    cell = tmp_path / "cell.py"
    cell.write_text(source)
    namespace = {"__name__": "__main__"}
    exec(compile(source, str(cell), "exec"), namespace)
    return namespace[name]


NOTEBOOK_CELL = """
import torch.distributed as dist
import harness.distributed as hd
from harness.distributed import get_rank as rank_of

FACTOR = 3
LOOKUP = {"weights": __import__("torch").ones(2)}

def scaled(x):
    return x * FACTOR

class Box:
    def __init__(self, value):
        self.value = scaled(value)

def train(x):
    return Box(x).value + rank_of() + hd.get_world_size()

def uses_a_tensor_global():
    return float(LOOKUP["weights"].sum())

def uses_an_undefined_name():
    return missing_helper()

def ping(n):
    return 0 if n == 0 else pong(n - 1)

def pong(n):
    return ping(n)
"""


def test_generated_script_holds_the_notebook_function_and_what_it_uses(tmp_path):
    script = function_script(notebook_function(tmp_path, NOTEBOOK_CELL, "train"), tmp_path)
    namespace = {"__name__": "generated"}
    exec(compile(script, "rank_main.py", "exec"), namespace)  # the script runs on its own
    assert namespace["train"](2) == 2 * 3 + 0 + 1
    assert "class Box" in script and "FACTOR = 3" in script
    assert "from harness.distributed import get_rank as rank_of" in script
    assert "import harness.distributed as hd" in script and "LOOKUP" not in script


def test_mutually_recursive_notebook_functions_are_sent_once(tmp_path):
    script = function_script(notebook_function(tmp_path, NOTEBOOK_CELL, "ping"), tmp_path)
    assert script.count("def ping") == 1 and script.count("def pong") == 1
    namespace = {"__name__": "generated"}
    exec(compile(script, "rank_main.py", "exec"), namespace)
    assert namespace["ping"](5) == 0


def test_a_global_that_cannot_be_sent_is_named(tmp_path):
    with pytest.raises(TypeError, match="`uses_a_tensor_global` uses the global `LOOKUP` \\(a dict\\)"):
        function_script(notebook_function(tmp_path, NOTEBOOK_CELL, "uses_a_tensor_global"), tmp_path)
    with pytest.raises(NameError, match="`uses_an_undefined_name` uses `missing_helper`, which is not defined"):
        function_script(notebook_function(tmp_path, NOTEBOOK_CELL, "uses_an_undefined_name"), tmp_path)


def test_arguments_that_cannot_travel_are_refused():
    with pytest.raises(TypeError, match="the arguments cannot travel between processes"):
        launch(report_and_reduce, 2, args=(object(),))


def test_a_missing_script_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a file"):
        launch(tmp_path / "missing.py", 2)


# ------------------------------------------------------------------------------------ reports on timeouts

DUMP_WHILE_REPORTING_ITS_OWN_TIMEOUT = """Current thread 0x00007f0000000001 (most recent call first):
  File "{harness}/launch/hangs.py", line 66 in ask_for_stacks
  File "{harness}/launch/hangs.py", line 160 in note_timeout
  File "{harness}/launch/rank.py", line 75 in run_rank
  File "/tmp/harness-launch-x/rank_main.py", line 30 in <module>
"""


def test_ranks_whose_own_collectives_timed_out_are_reported_waiting_not_late(tmp_path):
    """Ranks that took different paths (rank 0 one batch more: DDP's all-reduce in backward; rank 1 a barrier)
    both time out. Rank 1 was reporting its own timeout when rank 0 asked for its stack: it waited, it was not late."""
    harness = os.path.dirname(os.path.dirname(hangs.__file__))
    assert hangs.where(DUMP_WHILE_REPORTING_ITS_OWN_TIMEOUT.format(harness=harness)) == (
        "waiting in a collective that timed out there too")
    rank0 = tmp_path / "timeout_0.txt"
    rank0.write_text("  rank 0: timed out waiting in backward, where DDP all-reduces the gradients (called at "
                     "loop.py line 9 in train: loss.backward())\n  rank 1: waiting in a collective that timed out "
                     "there too")
    rank1 = tmp_path / "timeout_1.txt"
    rank1.write_text("  rank 1: timed out waiting in barrier (called at loop.py line 12 in train: dist.barrier())\n"
                     "  rank 0: did not arrive: at loop.py line 30 in <module>: run_rank(train)")
    os.utime(rank1, ns=(rank0.stat().st_mtime_ns + 1000, rank0.stat().st_mtime_ns + 1000))  # rank 0's came first
    rank, message = blame(tmp_path, {0: 1, 1: 1}, "[rank0] one batch more\n")
    assert rank == 0, message
    assert message.startswith("a collective timed out: rank 0 waited in it past its timeout (the step deadline), "
                              "and the launch was ended. Where each rank was:\n"
                              "  rank 0: timed out waiting in backward, where DDP all-reduces the gradients"), message
    assert "\n  rank 1: timed out waiting in barrier (called at loop.py line 12 in train: dist.barrier())\n" in message
    assert "did not arrive" not in message and "one batch more" in message.split("Its last output lines:")[1]


# ---------------------------------------------------------------------------------------------- forked


def add_rank(offset: int) -> torch.Tensor:
    value = torch.tensor([float(dist.get_rank() + offset)])
    dist.all_reduce(value)
    return value


@pytest.mark.slow
def test_forked_launch_returns_every_rank_result():
    result = launch_forked(add_rank, 2, args=(10,))
    assert [r.item() for r in result.results] == [21.0, 21.0]
    assert_no_children_left()


@pytest.mark.slow
def test_forked_launch_reports_a_crash_and_ends_the_others():
    with pytest.raises(LaunchError, match="rank 1 failed") as failure:
        launch_forked(rank1_crashes, 2, timeout_s=30)
    assert "ValueError: planted failure on rank 1" in str(failure.value)
    assert_no_children_left()


@pytest.mark.slow
def test_forked_launch_times_out_and_ends_every_rank():
    started = time.monotonic()
    with pytest.raises(LaunchError, match="did not finish within 2 s"):
        launch_forked(hangs_forever, 2, timeout_s=2)
    assert time.monotonic() - started < 10
    assert_no_children_left()


@pytest.mark.gpu
@pytest.mark.slow
def test_forked_launch_refuses_after_cuda_initialisation():
    # In a child interpreter: initialising CUDA here would make every later forked launch of this worker refuse.
    program = (
        "import torch\n"
        "from harness.launch import launch_forked\n"
        "torch.zeros(1, device='cuda')\n"
        "try:\n"
        "    launch_forked(print, 1)\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert "CUDA is already initialised" in done.stdout, done.stdout + done.stderr


@pytest.mark.gpu
@pytest.mark.slow
def test_forked_launch_of_cpu_work_after_cuda_initialisation_when_allowed():
    # DataLoader workers fork after CUDA was initialised all the time: safe for ranks that stay on the CPU.
    program = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "from harness.launch import launch_forked\n"
        "torch.zeros(1, device='cuda')\n"
        "def cpu_sum():\n"
        "    value = torch.ones(1)\n"
        "    dist.all_reduce(value)\n"
        "    return value.item()\n"
        "print('results', launch_forked(cpu_sum, 2, cuda_initialized_ok=True).results)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert "results [2.0, 2.0]" in done.stdout, done.stdout + done.stderr

def cuda_rank_report() -> dict:
    value = torch.tensor([float(dist.get_rank() + 1)], device="cuda")
    dist.all_reduce(value)
    return {"device": f"cuda:{torch.cuda.current_device()}", "sum": value.item(), "backend": dist.get_backend()}


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.xdist_group("torchrun")
def test_launch_with_nccl_gives_each_rank_its_own_gpu():
    nproc = torch.cuda.device_count()
    results = launch(cuda_rank_report, nproc, backend="nccl", quiet=True).results
    assert [r["device"] for r in results] == [f"cuda:{rank}" for rank in range(nproc)]
    assert all(r["backend"] == "nccl" and r["sum"] == nproc * (nproc + 1) / 2 for r in results)
    assert_no_children_left()


def test_forked_launch_refuses_too_many_ranks():
    with pytest.raises(ValueError, match="CPU cores"):
        launch_forked(add_rank, (os.cpu_count() or 1) + 64, args=(0,))
