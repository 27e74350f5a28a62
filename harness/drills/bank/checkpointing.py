"""Drills on checkpointing: complete checkpoints, exact resume, portable state dicts, safe loading, atomic
writes, saving under DDP."""

from __future__ import annotations

import io
import os
import random
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.contract.case import Case
from harness.contract.wire import describe
from harness.drills.core import Drill, add
from harness.drills.support import explain, run_on_two_ranks


def _weights_only_error(error: BaseException) -> bool:
    """Whether `error` is torch.load refusing a checkpoint that is not made of tensors and plain values."""
    return "weights_only" in str(error) or "Unsupported global" in str(error)


class _LoadRecorder:
    """Patches torch.load in the answer's process to record the weights_only argument of each call."""

    def __init__(self) -> None:
        self.weights_only: list[Any] = []
        self._real = torch.load

    def __enter__(self) -> _LoadRecorder:
        real = self._real

        def recording_load(*args: Any, **kwargs: Any) -> Any:
            self.weights_only.append(kwargs.get("weights_only", "default"))
            return real(*args, **kwargs)

        torch.load = recording_load
        return self

    def __exit__(self, *exc: object) -> None:
        torch.load = self._real


# --- resuming: one probe and one judge for every "save, load in a fresh setup, train on" drill -------------

def _setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The exact-resume drills' model, Adam and StepLR; seeds the global RNG with `seed` first."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train_epochs(model, optimizer, scheduler, first: int, last: int) -> None:
    """One step per epoch on a batch drawn from the global RNG (resuming must restore it)."""
    for _ in range(first, last):
        x = torch.randn(32, 6)
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def _full_setup(seed: int) -> tuple:
    """The full-state drill: a model with dropout (global RNG), SGD with momentum, StepLR, a GradScaler and
    the data's own torch.Generator."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1)
    generator = torch.Generator().manual_seed(seed + 1)
    return model, optimizer, scheduler, scaler, generator


def _full_epochs(model, optimizer, scheduler, scaler, generator, first: int, last: int) -> None:
    """One scaled step per epoch: data from `generator`, dropout from the global RNG, unscale_ then clip."""
    model.train()
    for _ in range(first, last):
        x = torch.randn(32, 6, generator=generator)
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()


def observe_resume(objects: tuple) -> dict:
    """What the judge compares after a run: weights, the optimizer's step count, the scheduler's epoch, the
    scaler's scale and the RNG states."""
    model, optimizer, scheduler = objects[:3]
    seen: dict[str, Any] = {"params": [p.detach().clone() for p in model.parameters()],
                            "rng": torch.get_rng_state(), "sched_epoch": scheduler.last_epoch}
    first = optimizer.state.get(next(model.parameters()), {})
    seen["opt_step"] = int(first["step"]) if "step" in first else (1 if first else 0)
    if len(objects) == 5:
        seen["scale"] = float(objects[3].get_scale())
        seen["data_rng"] = objects[4].get_state()
    return seen


def resume_kit(full: bool) -> tuple[Callable[[int], tuple], Callable[..., None]]:
    """The resume drill's (setup, train_epochs): with scheduler, scaler and RNG when `full`, else plain."""
    return (_full_setup, _full_epochs) if full else (_setup, _train_epochs)


def _make_resume_probe(full: bool) -> Callable[..., dict]:
    setup, train = resume_kit(full)

    def probe(answer: dict, *, case: Case) -> dict:
        save, load = answer["save_checkpoint"], answer["load_checkpoint"]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ckpt.pt"
            objects = setup(case.seeded(0))
            train(*objects, 0, 3)
            save(path, *objects, 3)
            fresh = setup(case.seeded(0) + 7919)  # a fresh process: other weights, another RNG state
            with _LoadRecorder() as loads:
                try:
                    epoch = load(path, *fresh)
                except Exception as error:
                    if _weights_only_error(error):
                        return {"loads": loads.weights_only, "weights_only_error": str(error)[:160]}
                    raise
            try:
                torch.load(path, weights_only=True)
                refused = None
            except Exception as error:
                refused = str(error)[:160] if _weights_only_error(error) else None
            after_load = [p.detach().clone() for p in fresh[0].parameters()]
            train(*fresh, 3, 6)
        return {"loads": loads.weights_only, "weights_only_error": refused, "after_load": after_load,
                "epoch": epoch if isinstance(epoch, (int, float)) else describe(epoch), **observe_resume(fresh)}

    return probe


add(
    Drill(
        id="checkpointing-exact-resume",
        self_check=True,
        title="A complete checkpoint for exact resume",
        kind="write",
        topics=("checkpointing", "repro"),
        difficulty=2,
        prompt="Write save_checkpoint(path, model, optimizer, scheduler, epoch) and load_checkpoint(path, model, "
        "optimizer, scheduler) -> epoch such that training resumed from the checkpoint is bitwise identical to "
        "training that never stopped. The training draws its data from torch's global RNG. "
        "Load with weights_only=True.",
        entry="load_checkpoint",
        starter="import torch\n\n\ndef save_checkpoint(path, model, optimizer, scheduler, epoch):\n"
        "    raise NotImplementedError\n\n\n"
        "def load_checkpoint(path, model, optimizer, scheduler):\n    raise NotImplementedError\n",
        hints=("List everything that changes during training, not just the weights.",
               "model, optimizer and scheduler state_dicts, the epoch, and torch.get_rng_state()."),
        probe=_make_resume_probe(full=False),
    )
)

# --- portable state dicts ------------------------------------------------------------------------------------

class _PortableNet(nn.Module):
    """A model whose own key names contain 'module.' in the middle ('encoder.submodule.0.weight'), under names
    drawn from the case (`names`: the outer block, the inner one, the head), so no list of keys answers two cases."""

    def __init__(self, width: int, names: tuple[str, str, str]) -> None:
        super().__init__()
        outer, inner, head = names
        self.add_module(outer, nn.Module())
        getattr(self, outer).add_module(inner, nn.Sequential(nn.Linear(3, width), nn.BatchNorm1d(width)))
        self.add_module(head, nn.Linear(width, 2))


# The names _PortableNet's blocks are drawn from: every inner one ends in 'module', so 'module.' is in its keys
_PORTABLE_NAMES = (("encoder", "backbone", "trunk", "stem"),
                   ("submodule", "main_module", "inner_module", "core_module"), ("head", "classifier", "out"))


def strip_inputs(case: Case) -> tuple[dict[str, torch.Tensor], list[tuple[str, dict[str, torch.Tensor]]]]:
    """The plain state dict and the wrapped variants (probe and judge alike)."""
    rng = random.Random(case.seeded(5))
    names = tuple(rng.choice(pool) for pool in _PORTABLE_NAMES)
    torch.manual_seed(case.seeded(0))
    width = 3 + case.seeded(0) % 5
    base = _PortableNet(width, names).state_dict()  # type: ignore[arg-type]
    variants = [("plain", dict(base))]
    for name, prefix in (("DDP", "module."), ("compiled", "_orig_mod."), ("DDP of compiled", "module._orig_mod."),
                         ("compiled DDP", "_orig_mod.module.")):
        variants.append((name, {prefix + key: value for key, value in base.items()}))
    return base, variants


def _probe_strip(answer: dict, *, case: Case) -> dict:
    _, variants = strip_inputs(case)
    outputs = []
    for _, state in variants:
        got = answer["portable_state_dict"](state)
        outputs.append({"keys": list(got), "values": list(got.values())} if isinstance(got, dict) else describe(got))
    return {"outputs": outputs}


# --- weights_only --------------------------------------------------------------------------------------------

def _weights_only_experiment() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        torch.save(nn.Linear(2, 2), path)  # a whole pickled module
        try:
            torch.load(path, weights_only=True)
        except Exception as error:
            why = [line.strip() for line in str(error).splitlines() if "Unsupported global" in line]
            print(f"weights_only=True refuses a pickled module: {type(error).__name__}: "
                  f"{(why or ['Weights only load failed'])[0][:100]}")
        torch.save({"model": nn.Linear(2, 2).state_dict(), "epoch": 3}, path)
        print(f"a dict of state dicts and plain values loads: keys {list(torch.load(path, weights_only=True))}")
    print("unpickling can run arbitrary code; weights_only restricts loading to tensors and plain containers.")


add(
    explain(
        id="checkpointing-weights-only",
        title="Why load checkpoints with weights_only=True?",
        topics=("checkpointing",),
        difficulty=1,
        question="Why load checkpoints with torch.load(path, weights_only=True)?",
        hints=("What can a pickle do when it is loaded?", "pickle's __reduce__ can call any function."),
        experiment=_weights_only_experiment,
    )
)


# --- atomic save ---------------------------------------------------------------------------------------------

def atomic_save_states(case: Case) -> list[dict[str, torch.Tensor]]:
    """Three state dicts to save one after the other: a (5, 4) weight and a step counter each."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    return [{"weight": torch.randn(5, 4, generator=gen), "step": torch.tensor(case.seeded(k))} for k in range(3)]


class _SaveWatcher:
    """Patches torch.save and os's rename/replace/remove in the answer's process: records them, and makes
    torch.save crash half-way through its write while `crash` is set."""

    _OS = ("replace", "rename", "remove", "unlink")

    def __init__(self, answer: dict) -> None:
        self.answer, self.events, self.crash = answer, [], False
        self._real = {"save": torch.save, **{name: getattr(os, name) for name in self._OS}}

    def _target(self, f: Any) -> str:
        return os.fspath(f) if isinstance(f, (str, os.PathLike)) else f"<file object {getattr(f, 'name', '?')}>"

    def __enter__(self) -> _SaveWatcher:
        real = self._real

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            self.events.append(["save", self._target(f)])
            if not self.crash:
                return real["save"](obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            real["save"](obj, buffer)
            half = buffer.getvalue()[: len(buffer.getvalue()) // 2]
            if isinstance(f, (str, os.PathLike)):
                with open(f, "wb") as handle:
                    handle.write(half)
            else:
                f.write(half)
                f.flush()
            raise OSError(28, "No space left on device (the check's simulated crash mid-write)")

        def wrap(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                self.events.append([name, *(os.fspath(a) for a in args if isinstance(a, (str, os.PathLike)))])
                return real[name](*args, **kwargs)
            return call

        self.patched = {"save": save, **{name: wrap(name) for name in self._OS}}
        torch.save = save
        for name in self._OS:
            setattr(os, name, self.patched[name])
        for key, value in list(self.answer.items()):  # `from torch import save` in the answer
            for name, original in real.items():
                if value is original:
                    self.answer[key] = self.patched[name]
        return self

    def __exit__(self, *exc: object) -> None:
        torch.save = self._real["save"]
        for name in self._OS:
            setattr(os, name, self._real[name])


def _read_back_bytes(data: bytes) -> Any:
    """The weight and step of a checkpoint held in `data`, or why it cannot be read."""
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:
        return f"unreadable ({type(error).__name__})"
    return [state.get("weight"), state.get("step")] if isinstance(state, dict) else describe(state)


def _read_back_file(path: Path) -> Any:
    return _read_back_bytes(path.read_bytes()) if path.exists() else "missing"


def _probe_atomic(answer: dict, *, case: Case) -> dict:
    states = atomic_save_states(case)
    with tempfile.TemporaryDirectory() as tmp, _SaveWatcher(answer) as watcher:
        path = Path(tmp) / "ckpt.pt"
        answer["save_atomic"](states[0], path)
        first, listing = _read_back_file(path), sorted(os.listdir(tmp))
        watcher.crash, raised = True, False
        try:
            answer["save_atomic"](states[1], path)
        except OSError:
            raised = True
        watcher.crash = False
        after_crash = _read_back_file(path)
        with open(path, "rb") as reader:  # a loader that had the checkpoint open: a rename leaves it the old file
            answer["save_atomic"](states[2], path)
            held = _read_back_bytes(reader.read())
        third = _read_back_file(path)
        return {"first": first, "listing": listing, "after_crash": after_crash, "raised": raised, "third": third,
                "held": held, "events": watcher.events, "path": str(path)}


# --- saving under DDP ----------------------------------------------------------------------------------------

def rank0_model(case: Case) -> nn.Module:
    """A small model whose layer names are drawn from the case, so no list of saved keys answers two cases."""
    rng = random.Random(case.seeded(5))
    pools = (("fc1", "proj", "embed"), ("bn", "norm", "batch_norm"), ("fc2", "out", "head"))
    names = [rng.choice(pool) for pool in pools]
    torch.manual_seed(case.seeded(0))
    model = nn.Sequential(OrderedDict(zip(names, (nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)), strict=True)))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)  # buffers that must be saved too
    return model


def _probe_rank0(answer: dict, *, case: Case) -> dict:
    save_on_rank0 = answer["save_on_rank0"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pt")

        def work(rank: int) -> int:
            model = DDP(rank0_model(case))
            real, count = torch.save, [0]

            def counting_save(*args: Any, **kwargs: Any) -> None:
                count[0] += 1
                return real(*args, **kwargs)

            torch.save = counting_save
            try:
                save_on_rank0(model, path)
            finally:
                torch.save = real
            return count[0]

        saves = run_on_two_ranks(work)
        if not os.path.exists(path):
            return {"saves": saves, "state": "missing"}
        try:
            state = torch.load(path, weights_only=True)
        except Exception as error:
            return {"saves": saves, "state": f"refused by weights_only=True: {str(error)[:120]}"}
    if isinstance(state, dict) and all(isinstance(k, str) for k in state):
        return {"saves": saves, "state": {"keys": list(state), "values": list(state.values())}}
    return {"saves": saves, "state": describe(state)}


add(
    Drill(
        id="checkpointing-rank0-save",
        self_check=True,
        title="Saving a DDP model: rank 0, unwrapped",
        kind="write",
        topics=("checkpointing", "ddp"),
        difficulty=2,
        prompt="In a DDP run (the process group is initialised), write save_on_rank0(ddp_model, path): save the "
        "model's weights and buffers to path as a state dict that the plain, unwrapped model loads strictly "
        "(no 'module.' prefix). Only rank 0 writes the file.",
        entry="save_on_rank0",
        starter="import torch\nimport torch.distributed as dist\n\n\ndef save_on_rank0(ddp_model, path):\n"
        "    raise NotImplementedError\n",
        hints=("Every rank holds the same weights: how many copies of the file do you need?",
               "DDP wraps the model: its own state_dict lives in ddp_model.module.",
               "if dist.get_rank() == 0: torch.save(ddp_model.module.state_dict(), path)"),
        probe=_probe_rank0,
    )
)


# --- what weights_only refuses, and loading an old checkpoint safely --------------------------------------------

_TRIPPED: list[str] = []


def _tripwire(message: str) -> str:
    """What a malicious checkpoint's pickle calls when it is unpickled (a real one would call os.system)."""
    _TRIPPED.append(message)
    return message


class _Exploit:
    """An object whose pickle makes the unpickler call `_tripwire`: the shape of every malicious checkpoint."""

    def __reduce__(self) -> tuple:
        return (_tripwire, ("code ran while loading the checkpoint",))


def legacy_contents(case: Case) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A legacy checkpoint's state dict (weight and bias) and training arguments (lr, epochs, name)."""
    gen = torch.Generator().manual_seed(case.seeded(0))
    state = {"weight": torch.randn(3, 4, generator=gen), "bias": torch.randn(3, generator=gen)}
    args = {"lr": round(float(torch.rand((), generator=gen)) / 10, 6), "epochs": 5 + case.seeded(0) % 20,
            "name": f"run-{case.seeded(0)}"}
    return state, args


def _probe_legacy(answer: dict, *, case: Case) -> dict:
    import argparse

    state, args = legacy_contents(case)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        legit, hostile = Path(tmp) / "legacy.pt", Path(tmp) / "downloaded.pt"
        torch.save({"model": state, "args": argparse.Namespace(**args)}, legit)
        torch.save({"model": state, "args": _Exploit()}, hostile)
        try:
            loaded = answer["load_legacy"](legit)
        except Exception as error:
            if not _weights_only_error(error):
                raise
            seen["refused"] = str(error)[:160]
        else:
            model, namespace = (loaded.get("model"), loaded.get("args")) if isinstance(loaded, dict) else (None, None)
            seen["model"] = dict(model) if isinstance(model, dict) else describe(model)
            seen["args"] = dict(vars(namespace)) if isinstance(namespace, argparse.Namespace) else describe(namespace)
        _TRIPPED.clear()
        try:
            answer["load_legacy"](hostile)
            seen["hostile"] = "loaded"
        except Exception as error:
            seen["hostile"] = f"{type(error).__name__}"
        seen["tripped"] = bool(_TRIPPED)
    return seen


add(
    Drill(
        id="checkpointing-safe-legacy-load",
        self_check=True,
        title="Loading an old checkpoint without weights_only=False",
        kind="write",
        topics=("checkpointing",),
        difficulty=2,
        prompt="Old checkpoints of your team hold {'model': state_dict, 'args': argparse.Namespace(...)}, and "
        "torch.load(path, weights_only=True) refuses them. Write load_legacy(path) -> the loaded dict that loads "
        "them, with the Namespace, while a file whose pickle names any other global (a downloaded checkpoint that "
        "would run code) is still refused with an error.",
        entry="load_legacy",
        starter="import argparse\n\nimport torch\n\n\ndef load_legacy(path):\n"
        "    return torch.load(path, weights_only=True)\n",
        hints=("weights_only=False would load it, and anything else too. What does the error message suggest instead?",
               "Allowlist exactly the one type: torch.serialization.safe_globals([argparse.Namespace]) around "
               "torch.load(path, weights_only=True)."),
        probe=_probe_legacy,
    )
)
