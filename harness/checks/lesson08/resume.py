"""08-resume, the probe.

Train continuously, checkpoint mid-way, resume (in a fresh process when visible); record the checkpoint,
what the resume restored and both runs' final weights.
"""

from __future__ import annotations

import builtins
import copy
import dis
import functools
import inspect
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.lesson08.common import _crash_through, _CrashDuringSave, _read_back, as_data
from harness.checks.lesson08.writes import watching
from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.registry import register


@dataclass
class _Run:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    generator: torch.Generator
    loader: DataLoader


@dataclass(frozen=True)
class ResumeSetting:
    """The resume check's run: seeds, length, the epoch it stops after and the best metric then."""

    seed: int
    data_seed: int
    epochs: int
    stop_at: int

    @property
    def best_metric(self) -> float:
        return 0.125 * self.stop_at


def resume_setting(case: Case) -> ResumeSetting:
    """The seeds, epoch count and stop epoch of the case's interrupted and reference runs."""
    seed, epochs, stop_at = (29, 5, 3) if case.hidden else (17, 4, 2)
    return ResumeSetting(case.seeded(seed), case.seeded(0), epochs, stop_at)


def build_run(seed: int, data_seed: int, epochs: int) -> _Run:
    """A small run with every kind of state: dropout (global RNG), shuffling (a generator), Adam moments, a
    per-step OneCycle schedule and a GradScaler whose scale grows during training. Seeds the global RNG."""
    data = torch.Generator().manual_seed(data_seed)
    inputs = torch.randn(64, 6, generator=data)
    targets = (inputs[:, :3].sum(1) > 0).long() + (inputs[:, 3] > 0.5).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed + 1)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True, generator=generator)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-2, total_steps=epochs * len(loader))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    return _Run(model, optimizer, scheduler, scaler, generator, loader)


def train_reference_epoch(run: _Run) -> None:
    """One epoch of the reference run: a scaled backward and a scaler step per batch, the scheduler stepped
    only when the step was not skipped (the scale did not drop)."""
    run.model.train()
    for inputs, targets in run.loader:
        loss = nn.functional.cross_entropy(run.model(inputs), targets)
        run.scaler.scale(loss).backward()
        scale = run.scaler.get_scale()
        run.scaler.step(run.optimizer)
        run.scaler.update()
        if run.scaler.get_scale() >= scale:
            run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)


def _objects(run: _Run) -> dict[str, Any]:
    return {
        "model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler, "scaler": run.scaler,
        "generator": run.generator,
    }


def snapshot(run: _Run) -> dict[str, Any]:
    """Every piece of state an exact resume needs, copied."""
    return copy.deepcopy(
        {
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "scaler": run.scaler.state_dict(),
            "rng": torch.get_rng_state(),
            "data_generator": run.generator.get_state(),
        }
    )


def _resume_in_child(
    load_checkpoint: Callable[..., Any], checkpoint: str, out: str, seed: int, data_seed: int, epochs: int
) -> None:
    """Run in the fresh process: build a run with other seeds, load, report the restored state, finish."""
    run = build_run(seed + 1000, data_seed, epochs)  # other seeds: nothing matches unless it is loaded
    torch.manual_seed(seed + 2000)
    counters = load_checkpoint(checkpoint, **_objects(run))
    # written before training on, so a resume that then crashes still shows what it restored
    torch.save({"counters": counters, "restored": snapshot(run)}, out + ".restored")
    start = int(counters["epoch"]) if isinstance(counters, dict) and "epoch" in counters else 0
    for _ in range(start, epochs):
        train_reference_epoch(run)
    torch.save(run.model.state_dict(), out)


def _globals_read(code: types.CodeType) -> set[str]:
    """The global names `code` (and the functions, lambdas and comprehensions inside it) reads, as Python
    resolves them: LOAD_GLOBAL (LOAD_NAME at module level) only. Attribute names (`os.path`, `model.train`),
    parameters and locals are not globals, even when the notebook has a global of the same name."""
    names = {instruction.argval for instruction in dis.get_instructions(code)
             if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_read(const)
    return names


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _rebuilt(value: Any, home: str, queue: list[Callable[..., Any]]) -> str | None:
    """A Python expression that re-creates `value` in a fresh process (where `importlib` is imported and the
    notebook's functions are defined), adding the notebook functions it needs to `queue`; None when it cannot
    be re-created: an object built at run time (a model, a tensor, an open file, an instance of a notebook
    class, a lambda) has no source the check can re-run, only its current state."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.device)):
        if isinstance(value, torch.dtype):
            return f"getattr(importlib.import_module('torch'), {str(value).removeprefix('torch.')!r})"
        return f"importlib.import_module('torch').device({str(value)!r})"
    if isinstance(value, (tuple, list)):
        items = [_rebuilt(item, home, queue) for item in value]
        if any(item is None for item in items):
            return None
        return ("(" + "".join(f"{item}, " for item in items) + ")") if isinstance(value, tuple) else (
            "[" + ", ".join(items) + "]")  # type: ignore[arg-type]
    if isinstance(value, dict):
        pairs = [(_rebuilt(key, home, queue), _rebuilt(item, home, queue)) for key, item in value.items()]
        if any(key is None or item is None for key, item in pairs):
            return None
        return "{" + ", ".join(f"{key}: {item}" for key, item in pairs) + "}"
    if isinstance(value, types.ModuleType):
        return f"importlib.import_module({value.__name__!r})"
    if isinstance(value, functools.partial):
        parts = [_rebuilt(value.func, home, queue)] + [_rebuilt(arg, home, queue) for arg in value.args]
        keywords = {key: _rebuilt(item, home, queue) for key, item in value.keywords.items()}
        if any(part is None for part in parts) or any(item is None for item in keywords.values()):
            return None
        arguments = [*parts, *(f"{key}={item}" for key, item in keywords.items())]
        return f"importlib.import_module('functools').partial({', '.join(arguments)})"  # type: ignore[arg-type]
    if isinstance(value, types.FunctionType) and value.__module__ == home and "<" not in value.__qualname__:
        queue.append(value)
        return value.__name__
    bound = getattr(value, "__self__", None)  # a bound method carries its object: not importable by name
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "<")
    importable = isinstance(module, str) and module != home and isinstance(qualname, str) and "<" not in qualname
    if importable and (bound is None or isinstance(bound, types.ModuleType)):
        return f"importlib.import_module({module!r}).{qualname}"
    return None


def _rebuild_source(functions: list[Callable[..., Any]]) -> str:
    """Python source that defines `functions` (and the same-module functions they call) in a new process:
    the globals they read that are modules, importable functions and classes, plain constants (and tuples,
    lists and dicts of them), dtypes, devices and `functools.partial` of these; any other global is an object
    built at run time, which cannot be re-created from source (see `_rebuilt`)."""
    home = functions[0].__module__
    lines: list[str] = ["import importlib"]
    after: list[str] = []  # the globals that use notebook functions: assigned once those are defined
    sources: list[str] = []
    done: set[str] = set()
    queue = list(functions)
    while queue:
        function = inspect.unwrap(queue.pop(0))  # the function whose source getsource reads, and so its globals
        if function.__name__ in done:
            continue
        done.add(function.__name__)
        try:
            sources.append(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError) as error:
            raise RuntimeError(
                f"the check cannot read the source of {function.__name__} ({error}); define it in a cell with def"
            ) from error
        for name in sorted(_globals_read(function.__code__) - done):
            if name not in function.__globals__ or hasattr(builtins, name):
                continue
            value = function.__globals__[name]
            if isinstance(value, types.FunctionType) and value.__module__ == home and value.__name__ == name:
                queue.append(value)
                continue
            waiting = len(queue)
            expression = _rebuilt(value, home, queue)
            if expression is None:
                raise RuntimeError(
                    f"{function.__name__} uses {name!r} ({type(value).__name__}), which the check cannot rebuild in a "
                    "fresh process: it is an object built at run time (a model, a tensor, an instance, a lambda), "
                    "and only modules, importable functions and classes, other notebook functions, plain "
                    "constants (numbers, strings, and tuples, lists and dicts of them) and functools.partial of "
                    "these can be re-created from source. Create it inside the function or pass it as an argument"
                )
            (after if len(queue) > waiting else lines).append(f"{name} = {expression}")
    return "\n".join(dict.fromkeys(lines)) + "\n\n" + "\n\n".join(reversed(sources)) + "\n\n" + "\n".join(
        dict.fromkeys(after))


class _UnsafePayload:
    """Unpickling it creates a file: the harmless stand-in for code hidden in a malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


PARTS = {
    "model": ("model-not-restored", "the model weights"),
    "optimizer": ("optimizer-not-restored", "the optimizer state (Adam's moment estimates and step counts)"),
    "scheduler": ("scheduler-not-restored", "the scheduler state (its step count: the lr would restart the schedule)"),
    "scaler": ("scaler-not-restored", "the GradScaler state (its scale and growth tracker)"),
    "rng": ("rng-not-restored", "the global RNG states (dropout masks would differ)"),
    "data_generator": ("data-order-not-restored", "the DataLoader generator (the shuffling order would differ)"),
}


def _unsafe_load_ran(
    load_checkpoint: Callable[..., Any], checkpoint: dict[str, Any], directory: Path, setting: ResumeSetting
) -> bool:
    """Whether load_checkpoint, given a checkpoint that hides a pickled call, ran that call."""
    marker = directory / "code-ran"
    trap_path = directory / "downloaded.pt"
    torch.save({**checkpoint, "note": _UnsafePayload(marker)}, trap_path)
    run = build_run(setting.seed + 3000, setting.data_seed, setting.epochs)
    try:
        load_checkpoint(trap_path, **_objects(run))
    except Exception:  # noqa: BLE001 -- weights_only=True refusing the file is the expected outcome
        pass
    return marker.exists()


def _save_that_crashes(save_checkpoint: Callable[..., Any], run: _Run, path: Path, epoch: int) -> Any:
    """Save the finished run over `path` while the model's state holds an entry whose pickling raises (a crash
    in the middle of torch.save); what `path` holds afterwards, read back, and what the notebook's atomic_save
    did (`_crash_through`)."""

    def add_crash(module: nn.Module, state: dict[str, Any], prefix: str, metadata: Any) -> None:
        state[prefix + "crash"] = _CrashDuringSave()

    writes: dict[str, Any] = {}

    def crash() -> None:
        handle = run.model.register_state_dict_post_hook(add_crash)
        try:
            with watching([path]) as seen:
                save_checkpoint(path, **_objects(run), epoch=epoch, best_metric=0.0)
        except Exception:  # noqa: BLE001 -- the simulated crash: what matters is the file it leaves
            pass
        finally:
            handle.remove()
            writes.update(seen)

    helper = _crash_through(save_checkpoint, crash, path.parent)
    return {"file": _read_back(path), **helper, "writes": writes}


def _rebuilt_or_fail(functions: tuple[Callable[..., Any], Callable[..., Any]]) -> str:
    """The source that re-creates save_checkpoint and load_checkpoint in a fresh process; `cannot-rebuild` when
    they use a global that cannot be re-created from source."""
    try:
        return _rebuild_source([functions[1], functions[0]])
    except RuntimeError as error:
        fail(
            "cannot-rebuild",
            observed=str(error),
            expected="functions defined with def in the notebook, using modules, other notebook functions and "
            "constants",
            cause="the check re-creates your functions in a fresh Python process from their source",
            where="load_checkpoint and the helpers it calls",
        )


def _run_child(
    functions: tuple[Callable[..., Any], Callable[..., Any]], directory: Path, checkpoint: Path, out: Path,
    setting: ResumeSetting,
) -> subprocess.CompletedProcess:
    """Run `_resume_in_child` in a fresh Python process, with the student's functions rebuilt from source."""
    save_checkpoint, load_checkpoint = functions
    source = _rebuilt_or_fail(functions)
    script = (
        # annotations stay strings: a type named in a signature need not be importable in the child
        "from __future__ import annotations\nimport torch\ntorch.set_num_threads(1)\n"
        f"{source}\n\n"
        "from harness.checks.lesson08.resume import _resume_in_child\n"
        f"_resume_in_child({load_checkpoint.__name__}, {str(checkpoint)!r}, {str(out)!r}, {setting.seed}, "
        f"{setting.data_seed}, {setting.epochs})\n"
    )
    (directory / "resume_child.py").write_text(script)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(directory / "resume_child.py")], cwd=directory, env=environment, capture_output=True,
        text=True, timeout=180,
    )


def _resume(
    functions: tuple[Callable[..., Any], Callable[..., Any]],
    directory: Path,
    checkpoint: Path,
    setting: ResumeSetting,
    fresh_process: bool,
) -> dict[str, Any]:
    """Resume from `checkpoint` (in a fresh process, or here with fresh objects); what was restored, the final
    weights, and the error if the resume crashed, read back as data."""
    out = directory / "resumed.pt"
    error = None
    if fresh_process:
        done = _run_child(functions, directory, checkpoint, out, setting)
        if done.returncode != 0:
            error = (done.stderr.strip().splitlines()[-1:] or ["(no message)"])[0][:300]
    else:
        _rebuilt_or_fail(functions)  # resumed here, but held to what a fresh process (the visible case) needs
        try:
            _resume_in_child(functions[1], str(checkpoint), str(out), setting.seed, setting.data_seed, setting.epochs)
        except Exception as raised:  # noqa: BLE001 -- the student's load crashed: the judge reports it
            error = f"{type(raised).__name__}: {raised}"[:300]
    return {"restored": _read_back(Path(f"{out}.restored")), "final": _read_back(out), "error": error}


@register("08-resume")
def probe_resume(save_checkpoint: Callable[..., Any], load_checkpoint: Callable[..., Any], *, case: Case) -> dict:
    """Train continuously, checkpoint mid-way, resume (in a fresh process when visible); record the checkpoint,
    what the resume restored and both runs' final weights."""
    setting = resume_setting(case)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs single-threaded too: identical float reductions, identical weights
    try:
        with torch.random.fork_rng(devices=[]), tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            path = directory / "checkpoint.pt"
            run = build_run(setting.seed, setting.data_seed, setting.epochs)
            for epoch in range(1, setting.epochs + 1):
                train_reference_epoch(run)
                if epoch == setting.stop_at:
                    with watching([path]) as writes:
                        save_checkpoint(path, **_objects(run), epoch=epoch, best_metric=setting.best_metric)
            seen: dict[str, Any] = {"continuous": as_data(run.model.state_dict()), "writes": writes}
            try:
                checkpoint = torch.load(path, weights_only=True)
            except Exception as error:  # noqa: BLE001 -- the refusal is the observation
                return {**seen, "refused": str(error)[:200]}
            seen |= {"refused": None, "checkpoint": as_data(checkpoint)}
            if not isinstance(checkpoint, dict) or not {*PARTS, "epoch", "best_metric"} <= set(checkpoint):
                return seen  # the judge fails on the missing part: resuming from it would only crash
            seen["unsafe_ran"] = _unsafe_load_ran(load_checkpoint, checkpoint, directory, setting)
            if seen["unsafe_ran"]:
                return seen  # the judge fails on the unsafe load before it looks at the resume
            # the visible test resumes in a fresh process; the hidden one (other seeds and epochs, same cell)
            # resumes here with freshly built objects and a scrambled RNG, which halves the cell's time
            seen |= _resume((save_checkpoint, load_checkpoint), directory, path, setting, fresh_process=not case.hidden)
            # last, once the checkpoint has served the resume: a save of the finished run that crashes half way
            seen["after_crash"] = _save_that_crashes(save_checkpoint, run, path, setting.epochs)
            return seen
    finally:
        torch.set_num_threads(threads)
