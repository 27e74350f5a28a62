"""Small tools the drills share: seeded cases and models, planted fixes, two real ranks for probes, explain drills."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from harness.contract.failure import fail

if TYPE_CHECKING:
    from harness.contract.case import Case
    from harness.drills.core import Drill


def case_generator(case: Case, base: int) -> torch.Generator:
    """A generator seeded from `case` and `base`: probe and judge draw the same case-specific values."""
    return torch.Generator().manual_seed(case.seeded(base))


def seeded_init(module: nn.Module, seed: int, scale: float = 1.0) -> nn.Module:
    """Overwrite every parameter of `module` from a seeded generator: probe and judge build the same model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            bound = scale / math.sqrt(parameter.shape[-1])
            parameter.copy_((torch.rand(parameter.shape, generator=generator) * 2 - 1) * bound)
    return module


def edited(source: str, *changes: tuple[str, str]) -> str:
    """`source` with each `(old, new)` change made, in order: a planted wrong answer written as a small explicit diff
    of a reference or a starter. Every `old` must occur in the source it changes, so a diff that no longer applies
    (its reference was edited) raises instead of planting the reference itself as a wrong answer.

    Raises:
        ValueError: an `old` that is not in the source.
    """
    for old, new in changes:
        if old not in source:
            raise ValueError(f"{old!r} is not in the source")
        source = source.replace(old, new)
    return source


def with_fixes(source: str, *fixes: tuple[str, ...]) -> str:
    """`source` with each fix applied; a fix is (old, new, old, new, ...): texts that must occur in `source`.
    Difficulty-3 drills build their planted wrong answers this way: the starter with some of its bugs fixed."""
    return edited(source, *(pair for fix in fixes for pair in zip(fix[::2], fix[1::2], strict=True)))


def no_harness_shortcut(answer: dict) -> None:
    """Probe side: the answer may not borrow the checker's own instruments (harness.*) to produce its result."""
    for name, value in answer.items():
        module = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if not name.startswith("__") and isinstance(module, str) and module.split(".")[0] == "harness":
            fail("harness-import", observed=f"your answer imports {name} from {module}",
                 expected="an answer written with torch alone",
                 cause="the course's own instruments compute the result for you: the drill asks you to write it",
                 where="your imports")


def run_on_two_ranks(work, timeout_s: float = 60.0) -> list:
    """Run `work(rank)` in two forked processes joined in a real gloo process group; return their results.

    Forking (not spawning) lets `work` be any function, closures included, and costs no re-import of torch.
    The group meets through a store on a port reserved for it (`harness.launch.rendezvous`), so groups started
    at the same time never meet; a group that fails to form (a rank that could not join, or that ended or stopped
    answering before it had joined) is started again once. A rank that raises makes this raise with its message.
    """
    collected = _two_ranks_once(work, timeout_s)
    if any(stage == "setup" for stage, _ in collected.values()):  # `work` never ran: safe to start again
        collected = _two_ranks_once(work, timeout_s)
    for rank in (0, 1):
        stage, value = collected[rank]
        if stage != "done":
            raise RuntimeError(f"rank {rank} failed: {value}")
    return [collected[0][1], collected[1][1]]


# How long the ranks still have to report once one of them could not join or ended without a report
_GRACE_S = 2.0


def _two_ranks_once(work, timeout_s: float) -> dict:
    """One try of `run_on_two_ranks`: {rank: ("done", result) | ("setup" | "work", report)}.

    A rank that ends without a report, or has none by the deadline, is reported at the group's stage: "setup" until a
    rank had joined. Once a rank could not join, or ended without a report, the other cannot finish
    (joining is a barrier): it has a moment to report, then it is ended."""
    import multiprocessing as mp
    import queue
    import traceback
    from datetime import timedelta

    from harness.launch.rendezvous import join_group, reserve_store

    context = mp.get_context("fork")
    results = context.Queue()
    store = reserve_store(2)

    def target(rank: int) -> None:
        import gc

        import torch.distributed as dist

        gc.freeze()  # never run an inherited finalizer here (an earlier group's TCPStore server crashes the rank)
        stage = "setup"
        try:
            join_group(store.port, rank, 2, timedelta(seconds=timeout_s))
            stage = "work"
            results.put((rank, "joined", None))
            results.put((rank, "done", work(rank)))
        except BaseException as error:  # report, never hang the parent
            results.put((rank, stage, f"{type(error).__name__}: {error}\n{traceback.format_exc()[-800:]}"))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    processes = [context.Process(target=target, args=(rank,)) for rank in (0, 1)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s + 15  # past the ranks' own timeout: a rank that timed out still reports
    collected: dict[int, tuple[str, object]] = {}
    # Joining ends in a barrier: once one rank has joined, every rank reached it and `work` may have run; before
    # that, it ran nowhere.
    joined, stopped = False, set()
    try:
        while len(collected) < 2 and time.monotonic() < deadline:
            try:
                rank, stage, value = results.get(timeout=0.2)
                if stage == "joined":
                    joined = True
                else:
                    collected[rank] = (stage, value)
            except queue.Empty:
                pass
            ended = any(process.exitcode is not None for r, process in enumerate(processes) if r not in collected)
            if ended or any(stage == "setup" for stage, _ in collected.values()):
                deadline = min(deadline, time.monotonic() + _GRACE_S)
    finally:
        for rank, process in enumerate(processes):
            process.join(timeout=5 if len(collected) == 2 else 0)
            if process.is_alive():
                stopped.add(rank)
                process.kill()
                process.join()
    for rank, process in enumerate(processes):
        if rank not in collected:
            code = process.exitcode
            why = ("had not reported its outcome when it was ended" if rank in stopped else
                   f"was killed by signal {-code} before it reported its outcome" if code < 0 else
                   f"ended with exit code {code} without reporting its outcome")
            collected[rank] = ("work" if joined else "setup", f"rank {rank} {why}")
    return collected


def explain(*, id: str, title: str, topics: tuple[str, ...], difficulty: int, question: str,
            hints: tuple[str, ...], experiment: Callable[[], None]) -> Drill:
    """An "explain" drill's probe side: the question, its hints and the experiment that proves the answer. Its
    four options and key are its judge side (`harness.drills.choices.choice_answers`)."""
    from harness.drills.core import Drill

    return Drill(id=id, title=title, kind="explain", topics=topics, difficulty=difficulty, prompt=question,
                 entry="answer", starter='answer = None  # "a", "b", "c" or "d"\n', hints=hints, experiment=experiment)
