"""Lesson 09: what several of its tasks share on the probe side (inputs, instruments, models)."""

from __future__ import annotations

import functools
from typing import Any, Callable, NoReturn

import torch
from torch import nn

from harness.contract.failure import fail
from harness.launch import LaunchError, launch_forked

WORLD = 2


LAUNCH_TIMEOUT_S = 30  # per attempt: generous for a loaded grading machine, far beyond a correct run


MODEL_SEED = 1234


def make_model(seed: int = MODEL_SEED) -> nn.Module:
    """The checks' tiny regression MLP, initialised identically on every call with the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


@functools.cache
def _warm_up_parent() -> None:
    """Take one optimizer step here, before forking: its first call imports seconds' worth of modules,
    which forked ranks then inherit instead of each importing them again."""
    parameter = nn.Parameter(torch.zeros(1))
    parameter.grad = torch.zeros(1)
    torch.optim.SGD([parameter], lr=0.1).step()


def _run_ranks(worker: Callable[..., Any], *args: Any, world: int = WORLD) -> list[Any]:
    """Run worker on `world` forked gloo ranks; a rank's exception becomes the student's exception."""
    _warm_up_parent()
    try:
        return launch_forked(worker, world, args=args, timeout_s=LAUNCH_TIMEOUT_S).results
    except LaunchError as error:
        if "did not finish" not in str(error):
            _report_launch_error(error)
    # A forked child of a multi-threaded kernel can, rarely, deadlock before it runs anything (a lock held by
    # another thread at fork time): a second attempt tells that apart from a student's real hang.
    try:
        return launch_forked(worker, world, args=args, timeout_s=LAUNCH_TIMEOUT_S).results
    except LaunchError as error:
        _report_launch_error(error)


# What gloo says, depending on timing, when the peer of a waiting rank has returned and closed its socket.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def _report_launch_error(error: LaunchError) -> NoReturn:
    """Turn a failed launch into the student's failure: a hang, a rank left waiting in a collective its peer never
    called (both seen only here), or the exception a rank raised."""
    last = str(error).strip().splitlines()[-1]
    if "did not finish" in str(error):
        fail("hang", observed=f"the ranks did not finish within {LAUNCH_TIMEOUT_S} s, twice",
             expected="every rank returns", cause="one rank waits in a collective (all_reduce, barrier) "
             "that another rank never calls, e.g. a collective inside `if rank == 0:`, or two ranks wait for each "
             "other (each receives before it sends)",
             where="collectives and barriers: every rank must call them, in the same order")
    if any(sign in str(error) for sign in _PEER_GONE):  # the first failure: the peer had returned, not crashed
        fail("hang", observed=f"rank {error.rank} was still waiting in a collective when the other rank closed "
             "its connection (it had returned, or ended without a Python error)",
             expected="every rank calls the same collectives, in the same order",
             cause="a collective (all_reduce, barrier, broadcast) that only some ranks call: inside "
             "`if rank == 0:`, or after a return that only some ranks take; less often, the other rank was killed "
             "(out of memory)",
             where="collectives and barriers: call them outside any `if rank == ...:` block")
    raise RuntimeError(f"on rank {error.rank}: {last}") from None


def detached_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of a state_dict's tensors, to send back from a rank."""
    return {k: v.detach().clone() for k, v in state.items()}
