"""Drills on checkpointing: complete checkpoints, exact resume, portable state dicts, safe loading, atomic
writes, saving under DDP."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.contract.case import Case
from harness.contract.compare import close_tensors
from harness.contract.failure import fail
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, run_on_two_ranks


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


def _observe(objects: tuple) -> dict:
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


def _resume_kit(full: bool) -> tuple[Callable[[int], tuple], Callable[..., None]]:
    return (_full_setup, _full_epochs) if full else (_setup, _train_epochs)


def _make_resume_probe(full: bool) -> Callable[..., dict]:
    setup, train = _resume_kit(full)

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
                "epoch": epoch if isinstance(epoch, (int, float)) else describe(epoch), **_observe(fresh)}

    return probe


def _make_resume_judge(full: bool) -> Callable[..., str]:
    setup, train = _resume_kit(full)

    def judge(seen: dict, *, case: Case) -> str:
        if not isinstance(seen.get("loads"), list):
            raise WireError("the torch.load calls' record is missing")
        if any(w is False for w in seen.get("loads", [])):
            fail("unsafe-load", observed="load_checkpoint called torch.load(..., weights_only=False)",
                 expected="torch.load(path, weights_only=True)", cause="weights_only=False unpickles whatever the "
                 "file holds, and unpickling can run arbitrary code", where="the torch.load call in load_checkpoint")
        if seen.get("weights_only_error"):
            fail("not-weights-only-loadable", observed=f"torch.load(weights_only=True) refused the checkpoint: "
                 f"{seen['weights_only_error']}",
                 expected="a checkpoint of state dicts, tensors and plain values",
                 cause="a pickled object (a whole module, optimizer or scaler) saved instead of its state_dict()",
                 where="the dict save_checkpoint passes to torch.save")
        reference = setup(case.seeded(0))
        train(*reference, 0, 3)
        at_save = [p.detach().clone() for p in reference[0].parameters()]
        train(*reference, 3, 6)
        want = _observe(reference)
        if seen["epoch"] != 3 or isinstance(seen["epoch"], bool):
            fail("wrong-epoch", observed=f"load_checkpoint returned {seen['epoch']!r}", expected="3, the epoch saved",
                 cause="the epoch counter was not saved, or not returned", where="save the epoch and return it")
        if not close_tensors(seen["after_load"], at_save, atol=1e-6, rtol=1e-5):
            fail("weights-not-restored", observed="right after load_checkpoint the model still has its fresh weights",
                 expected="the weights saved at epoch 3", cause="model.load_state_dict was not called (or on "
                 "another object)", where="model.load_state_dict(checkpoint['model'])")
        if seen["opt_step"] != want["opt_step"]:
            fail("missing-optimizer-state", observed=f"after resuming, the optimizer has taken {seen['opt_step']} "
                 f"steps in all", expected=f"{want['opt_step']} (3 before the checkpoint and 3 after)",
                 cause="the optimizer state (momentum buffers, Adam's moments and step count) was not "
                 "saved/restored: it starts again from zero", where="optimizer.state_dict() / load_state_dict")
        if seen["sched_epoch"] != want["sched_epoch"]:
            fail("missing-scheduler-state", observed=f"the scheduler ends at epoch {seen['sched_epoch']}",
                 expected=f"epoch {want['sched_epoch']}", cause="the scheduler state was not saved/restored: the "
                 "learning-rate schedule restarts from its first epoch", where="scheduler.state_dict() / "
                 "load_state_dict")
        if full and seen["scale"] != want["scale"]:
            fail("missing-scaler-state", observed=f"the GradScaler's scale after resuming is {seen['scale']:g}",
                 expected=f"{want['scale']:g}, as in the run that never stopped",
                 cause="the scaler state was not saved/restored: it restarts from init_scale (with fp16, its "
                 "first steps overflow and are skipped)", where="scaler.state_dict() / scaler.load_state_dict")
        if full and not torch.equal(seen["data_rng"], want["data_rng"]):
            fail("missing-generator-state", observed="the data generator's state after resuming differs from the "
                 "uninterrupted run's", expected="the same batches as the run that never stopped",
                 cause="only torch's global RNG was saved: the data comes from its own torch.Generator, which "
                 "restarts from its seed", where="generator.get_state() / generator.set_state()")
        if not torch.equal(seen["rng"], want["rng"]):
            fail("missing-rng-state", observed="torch's global RNG state after resuming differs from the "
                 "uninterrupted run's", expected="the same random draws as the run that never stopped",
                 cause="the global RNG state was not saved/restored: the resumed run draws other "
                 + ("dropout masks" if full else "data"), where="torch.get_rng_state() / torch.set_rng_state()")
        if not close_tensors(seen["params"], want["params"], atol=1e-6, rtol=1e-5):
            fail("resume-diverges", observed="the resumed run's weights differ from the uninterrupted run's",
                 expected="identical weights after resuming", cause="some state is restored wrongly",
                 where="compare what save_checkpoint writes with what load_checkpoint restores")
        return "resumed training matches the uninterrupted run: weights, optimizer, schedule" + (
            ", scaler, data and dropout RNGs" if full else " and RNG")

    return judge


_CKPT_SOLUTION = '''import torch


def save_checkpoint(path, model, optimizer, scheduler, epoch):
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "rng": torch.get_rng_state(),
    }, path)


def load_checkpoint(path, model, optimizer, scheduler):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["epoch"]
'''
_NO_OPTIMIZER = _CKPT_SOLUTION.replace('        "optimizer": optimizer.state_dict(),\n', "").replace(
    '    optimizer.load_state_dict(checkpoint["optimizer"])\n', "")
_PICKLED_OPTIMIZER = _CKPT_SOLUTION.replace('"optimizer": optimizer.state_dict()', '"optimizer": optimizer').replace(
    'optimizer.load_state_dict(checkpoint["optimizer"])',
    'optimizer.load_state_dict(checkpoint["optimizer"].state_dict())')

add(
    Drill(
        id="checkpointing-exact-resume",
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
        solution=_CKPT_SOLUTION,
        hints=("List everything that changes during training, not just the weights.",
               "model, optimizer and scheduler state_dicts, the epoch, and torch.get_rng_state()."),
        probe=_make_resume_probe(full=False),
        judge=_make_resume_judge(full=False),
        wrong_answers=(
            (_NO_OPTIMIZER, "missing-optimizer-state"),
            (_CKPT_SOLUTION.replace('        "scheduler": scheduler.state_dict(),\n', "").replace(
                '    scheduler.load_state_dict(checkpoint["scheduler"])\n', ""), "missing-scheduler-state"),
            (_CKPT_SOLUTION.replace('        "rng": torch.get_rng_state(),\n', "").replace(
                '    torch.set_rng_state(checkpoint["rng"])\n', ""), "missing-rng-state"),
            (_CKPT_SOLUTION.replace("weights_only=True", "weights_only=False"), "unsafe-load"),
            (_CKPT_SOLUTION.replace('"model": model.state_dict()', '"model": model').replace(
                'model.load_state_dict(checkpoint["model"])',
                'model.load_state_dict(checkpoint["model"].state_dict())'),
             "not-weights-only-loadable"),
        ),
    )
)

add(
    Drill(
        id="checkpointing-resume-diverges",
        title="Bug hunt: the resumed run diverges from the original",
        kind="bughunt",
        topics=("checkpointing",),
        difficulty=2,
        prompt="A run resumed from its checkpoint diverges from the run that never stopped: its loss jumps right "
        "after resuming (Adam's moments start again from zero). Fix the two functions.",
        entry="load_checkpoint",
        starter=_NO_OPTIMIZER,
        solution=_CKPT_SOLUTION,
        hints=("Which object holds per-parameter running averages?", "Save and restore optimizer.state_dict()."),
        probe=_make_resume_probe(full=False),
        judge=_make_resume_judge(full=False),
        wrong_answers=(
            (_CKPT_SOLUTION.replace('    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""),
             "missing-optimizer-state"),
            (_PICKLED_OPTIMIZER, "not-weights-only-loadable"),
        ),
    )
)

_FULL_SOLUTION = '''import torch


def save_checkpoint(path, model, optimizer, scheduler, scaler, generator, epoch):
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "epoch": epoch,
        "rng": torch.get_rng_state(),
        "data_rng": generator.get_state(),
    }, path)


def load_checkpoint(path, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["rng"])
    generator.set_state(checkpoint["data_rng"])
    return checkpoint["epoch"]
'''


def _without(source: str, *keys: str) -> str:
    """`_FULL_SOLUTION` without the save and load lines of the named parts."""
    lines = {"scheduler": ('        "scheduler": scheduler.state_dict(),\n',
                           '    scheduler.load_state_dict(checkpoint["scheduler"])\n'),
             "scaler": ('        "scaler": scaler.state_dict(),\n',
                        '    scaler.load_state_dict(checkpoint["scaler"])\n'),
             "data_rng": ('        "data_rng": generator.get_state(),\n',
                          '    generator.set_state(checkpoint["data_rng"])\n')}
    for key in keys:
        for line in lines[key]:
            source = source.replace(line, "")
    return source


_FULL_STARTER = _without(_FULL_SOLUTION, "scheduler", "scaler", "data_rng").replace(
    "import torch\n", "import torch\n\n# The training loop (not yours to change): per epoch, a batch drawn with "
    "`generator`, a model with\n# dropout (torch's global RNG), SGD with momentum, a StepLR scheduler and a "
    "GradScaler\n# (scale, backward, unscale_, clip, step, update). Resuming must replay it exactly.\n", 1)

add(
    Drill(
        id="checkpointing-full-training-state",
        title="Bug hunt: three things the checkpoint forgets",
        kind="bughunt",
        topics=("checkpointing", "amp", "repro"),
        difficulty=3,
        prompt="A training run with dropout, SGD + momentum, a StepLR scheduler, a GradScaler and a dedicated "
        "torch.Generator for its data is checkpointed after epoch 3 and resumed in a fresh process. The resumed run "
        "does not replay the run that never stopped. save_checkpoint / load_checkpoint have three bugs: find and "
        "fix them all (load with weights_only=True).",
        entry="load_checkpoint",
        starter=_FULL_STARTER,
        solution=_FULL_SOLUTION,
        hints=("List every object whose state changes during an epoch: the model, the optimizer... and four more.",
               "The schedule, the scaler's scale, and two random streams: torch's global RNG (dropout) and the "
               "data's own generator.",
               "Add scheduler.state_dict(), scaler.state_dict() and generator.get_state() to the checkpoint, and "
               "restore them with load_state_dict / set_state."),
        probe=_make_resume_probe(full=True),
        judge=_make_resume_judge(full=True),
        wrong_answers=(
            (_without(_FULL_SOLUTION, "data_rng"), "missing-generator-state"),
            (_without(_FULL_SOLUTION, "scaler"), "missing-scaler-state"),
            (_without(_FULL_SOLUTION, "scheduler"), "missing-scheduler-state"),
            (_FULL_SOLUTION.replace('        "rng": torch.get_rng_state(),\n', "").replace(
                '    torch.set_rng_state(checkpoint["rng"])\n', ""), "missing-rng-state"),
        ),
    )
)


# --- portable state dicts ------------------------------------------------------------------------------------

class _PortableNet(nn.Module):
    """A model whose own key names contain 'module.' in the middle ('encoder.submodule.0.weight')."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.submodule = nn.Sequential(nn.Linear(3, width), nn.BatchNorm1d(width))
        self.head = nn.Linear(width, 2)


def _strip_inputs(case: Case) -> tuple[dict[str, torch.Tensor], list[tuple[str, dict[str, torch.Tensor]]]]:
    """The plain state dict and the wrapped variants (probe and judge alike)."""
    torch.manual_seed(case.seeded(0))
    width = 3 + case.seeded(0) % 5
    base = _PortableNet(width).state_dict()
    variants = [("plain", dict(base))]
    for name, prefix in (("DDP", "module."), ("compiled", "_orig_mod."), ("DDP of compiled", "module._orig_mod."),
                         ("compiled DDP", "_orig_mod.module.")):
        variants.append((name, {prefix + key: value for key, value in base.items()}))
    return base, variants


def _probe_strip(answer: dict, *, case: Case) -> dict:
    _, variants = _strip_inputs(case)
    outputs = []
    for _, state in variants:
        got = answer["portable_state_dict"](state)
        outputs.append({"keys": list(got), "values": list(got.values())} if isinstance(got, dict) else describe(got))
    return {"outputs": outputs}


def _judge_strip(seen: dict, *, case: Case) -> str:
    base, variants = _strip_inputs(case)
    outputs = seen["outputs"]
    if not isinstance(outputs, list) or len(outputs) != len(variants):
        raise WireError("portable_state_dict outputs missing")
    want_keys = list(base)
    for (name, _), got in zip(variants, outputs, strict=True):
        if not isinstance(got, dict):
            fail("not-a-dict", observed=f"portable_state_dict returned {got}", expected="a dict of the same tensors",
                 cause="a list or a generator returned", where="return a dict")
        keys = got["keys"]
        if keys == want_keys:
            if not close_tensors(got["values"], list(base.values()), atol=1e-6, rtol=1e-5):
                fail("values-changed", observed=f"the {name} state dict's tensors changed", expected="the same tensors",
                     cause="keys and values paired wrongly", where="keep each value with its key")
            continue
        left = [k for k in keys if k.startswith(("module.", "_orig_mod."))]
        if left:
            fail("prefix-left", observed=f"keys after stripping a {name} state dict: {keys[:3]}...",
                 expected=f"{want_keys[:3]}...", cause="only one wrapper's prefix removed, or only once (prefixes "
                 "stack: DDP around a compiled model gives 'module._orig_mod.')",
                 where="strip 'module.' and '_orig_mod.' prefixes repeatedly, at the start of each key")
        fail("over-stripping", observed=f"keys after stripping a {name} state dict: {keys[:3]}...",
             expected=f"{want_keys[:3]}...", cause="text removed that is part of the model's own names: "
             "str.replace removes 'module.' inside 'encoder.submodule.0.weight' too, and splitting every key at "
             "its first dot strips plain keys", where="remove prefixes only at the start, only while present")
    return "strips DDP and torch.compile prefixes in any combination, only at the start of keys"


add(
    Drill(
        id="checkpointing-portable-state-dict",
        title="Portable state dicts: no module. or _orig_mod. prefixes",
        kind="write",
        topics=("checkpointing", "ddp"),
        difficulty=1,
        prompt="Write portable_state_dict(state) that removes the 'module.' (DDP) and '_orig_mod.' (torch.compile) "
        "prefixes from the start of every key, in any combination, so that the plain model loads it strictly. "
        "The model's own names may contain 'module' (encoder.submodule.0.weight).",
        entry="portable_state_dict",
        starter="def portable_state_dict(state):\n    raise NotImplementedError\n",
        solution=(
            "def portable_state_dict(state):\n    clean = {}\n    for key, value in state.items():\n"
            "        while key.startswith(('module.', '_orig_mod.')):\n            key = key.split('.', 1)[1]\n"
            "        clean[key] = value\n    return clean\n"
        ),
        hints=("Prefixes can stack: DDP around a compiled model gives 'module._orig_mod.'.",
               "Loop: while key.startswith(('module.', '_orig_mod.')): key = key.split('.', 1)[1]"),
        probe=_probe_strip,
        judge=_judge_strip,
        wrong_answers=(
            ("def portable_state_dict(state):\n"
             "    return {k.replace('module.', '').replace('_orig_mod.', ''): v for k, v in state.items()}\n",
             "over-stripping"),
            ("def portable_state_dict(state):\n    return {k.removeprefix('module.'): v for k, v in state.items()}\n",
             "prefix-left"),
            ("def portable_state_dict(state):\n"
             "    return {k.removeprefix('module.').removeprefix('_orig_mod.'): v for k, v in state.items()}\n",
             "prefix-left"),
            ("def portable_state_dict(state):\n    return {k.split('.', 1)[1]: v for k, v in state.items()}\n",
             "over-stripping"),
        ),
    )
)


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
    multiple_choice(
        id="checkpointing-weights-only",
        title="Why load checkpoints with weights_only=True?",
        topics=("checkpointing",),
        difficulty=1,
        question="Why load checkpoints with torch.load(path, weights_only=True)?",
        options=(
            ("it loads faster, because it skips unpickling Python objects",
             "speed is not the point: it still unpickles, with an unpickler restricted to safe types"),
            ("it leaves out the optimizer state and keeps only the weights",
             "it loads everything made of tensors and plain containers, optimizer state dicts included"),
            ("loading a pickle can run any code; this only rebuilds tensors and plain types",
             "a pickle's __reduce__ can call any function when loaded; weights_only refuses every global that is "
             "not on its allowlist, so a malicious or stale file fails loudly instead"),
            ("it maps every tensor onto the GPU the weights were saved from",
             "device placement is map_location's job; weights_only says nothing about devices"),
        ),
        key="c",
        hints=("What can a pickle do when it is loaded?", "pickle's __reduce__ can call any function."),
        experiment=_weights_only_experiment,
    )
)


# --- atomic save ---------------------------------------------------------------------------------------------

def _atomic_save_states(case: Case) -> list[dict[str, torch.Tensor]]:
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


def _read_back_file(path: Path) -> Any:
    if not path.exists():
        return "missing"
    try:
        state = torch.load(path, weights_only=True)
    except Exception as error:
        return f"unreadable ({type(error).__name__})"
    return [state.get("weight"), state.get("step")] if isinstance(state, dict) else describe(state)


def _probe_atomic(answer: dict, *, case: Case) -> dict:
    states = _atomic_save_states(case)
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
        answer["save_atomic"](states[2], path)
        third = _read_back_file(path)
        return {"first": first, "listing": listing, "after_crash": after_crash, "raised": raised, "third": third,
                "events": watcher.events, "path": str(path)}


def _judge_atomic(seen: dict, *, case: Case) -> str:
    states = _atomic_save_states(case)
    path = seen["path"]
    if not isinstance(path, str) or not isinstance(seen["events"], list):
        raise WireError("malformed observation")
    folder = os.path.dirname(path)

    def holds(got: Any, k: int) -> bool:
        return close_tensors(got, [states[k]["weight"], states[k]["step"]], atol=1e-6, rtol=1e-5)

    if not holds(seen["first"], 0):
        fail("wrong-content", observed=f"after save_atomic(state, path), path holds {describe(seen['first'])}",
             expected="the state saved, loadable with torch.load(path, weights_only=True)",
             cause="another object saved, or the file never moved to path",
             where="torch.save(obj, ...) then the rename")
    if not holds(seen["after_crash"], 0):
        fail("torn-write", observed=f"a save that crashed half-way left path {seen['after_crash']}" if isinstance(
            seen["after_crash"], str) else "a save that crashed half-way changed path",
             expected="the previous checkpoint, intact, until the new one is complete",
             cause="torch.save writes straight into path: a crash (disk full, preemption) mid-write destroys the "
             "only checkpoint", where="write to a temporary file in the same folder, then os.replace(tmp, path)")
    removed = [e for e in seen["events"] if e[:1] in (["remove"], ["unlink"]) and e[1:] == [path]]
    if removed:
        fail("window-without-checkpoint", observed=f"save_atomic deletes {path} before putting the new file in place",
             expected="one os.replace(tmp, path), which swaps the files atomically",
             cause="remove-then-rename leaves a moment with no checkpoint at all (a crash there loses both)",
             where="os.replace(tmp, path) replaces an existing file in one step; drop the remove")
    renames = [e for e in seen["events"] if e[:1] in (["replace"], ["rename"]) and len(e) == 3 and e[2] == path]
    if not renames:
        fail("no-atomic-rename", observed="no os.replace / os.rename onto path was called",
             expected="the finished temporary file renamed onto path",
             cause="copying (shutil.copy) or rewriting the file is not atomic: a crash mid-copy tears it too",
             where="os.replace(tmp, path) (or Path(tmp).replace(path))")
    elsewhere = [e[1] for e in renames if os.path.dirname(e[1]) != folder]
    if elsewhere:
        fail("temp-in-other-directory", observed=f"the temporary file is {elsewhere[0]}, not in {folder}",
             expected="the temporary file in the checkpoint's own folder",
             cause="tempfile.mkstemp() without dir= writes to /tmp: a rename across filesystems is not atomic (or "
             "fails with EXDEV)", where="tempfile.mkstemp(dir=path.parent) or path.with_suffix('.tmp')")
    if not seen["raised"]:
        fail("error-swallowed", observed="save_atomic returned normally although torch.save failed",
             expected="the OSError propagates to the caller", cause="a try/except that hides the failure: the run "
             "goes on believing it has a fresh checkpoint", where="clean up the temporary file, then re-raise")
    if not holds(seen["third"], 2):
        fail("wrong-content", observed="after a later successful save, path does not hold the new state",
             expected="the newest state", cause="a stale temporary file renamed, or the rename skipped",
             where="the temporary file's name and the rename")
    if seen["listing"] != [os.path.basename(path)]:
        fail("temp-left-behind", observed=f"after a successful save the folder holds {seen['listing']}",
             expected=f"only {os.path.basename(path)}", cause="the temporary file was copied, not moved, or a second "
             "file written", where="os.replace moves the temporary file; nothing else should remain")
    return "a crash mid-write leaves the previous checkpoint intact; each save lands in one atomic rename"


_ATOMIC_SOLUTION = '''import contextlib
import os
import tempfile
from pathlib import Path

import torch


def save_atomic(obj, path):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
'''

add(
    Drill(
        id="checkpointing-atomic-save",
        title="A checkpoint that a crash cannot tear",
        kind="write",
        topics=("checkpointing",),
        difficulty=2,
        prompt="Write save_atomic(obj, path): save obj with torch.save so that a crash half-way through the write "
        "(disk full, a preempted job) never leaves path holding a partial file: until the new checkpoint is "
        "complete, path keeps the previous one. The failure must still reach the caller.",
        entry="save_atomic",
        starter="import os\nimport tempfile\nfrom pathlib import Path\n\nimport torch\n\n\n"
        "def save_atomic(obj, path):\n    raise NotImplementedError\n",
        solution=_ATOMIC_SOLUTION,
        hints=("Never write into the file you want to keep. Where else can the bytes go first?",
               "Write a temporary file in the same folder, then os.replace(tmp, path): a rename on one filesystem is "
               "atomic, and it replaces an existing file in one step.",
               "tempfile.mkstemp(dir=path.parent), torch.save into it, os.replace; on an exception remove the "
               "temporary file and re-raise."),
        probe=_probe_atomic,
        judge=_judge_atomic,
        wrong_answers=(
            ("import torch\n\n\ndef save_atomic(obj, path):\n    torch.save(obj, path)\n", "torn-write"),
            ("import os\nimport torch\n\n\ndef save_atomic(obj, path):\n    tmp = str(path) + '.tmp'\n"
             "    torch.save(obj, tmp)\n    if os.path.exists(path):\n        os.remove(path)\n"
             "    os.rename(tmp, path)\n", "window-without-checkpoint"),
            ("import os\nimport tempfile\nimport torch\n\n\ndef save_atomic(obj, path):\n"
             "    fd, tmp = tempfile.mkstemp(suffix='.pt')\n    os.close(fd)\n    torch.save(obj, tmp)\n"
             "    os.replace(tmp, path)\n", "temp-in-other-directory"),
            ("import shutil\nimport torch\n\n\ndef save_atomic(obj, path):\n    tmp = str(path) + '.tmp'\n"
             "    torch.save(obj, tmp)\n    shutil.copyfile(tmp, path)\n", "no-atomic-rename"),
            ("import os\nimport torch\n\n\ndef save_atomic(obj, path):\n    tmp = str(path) + '.tmp'\n    try:\n"
             "        torch.save(obj, tmp)\n        os.replace(tmp, path)\n    except OSError as error:\n"
             "        print(f'checkpoint not saved: {error}')\n", "error-swallowed"),
        ),
    )
)


# --- saving under DDP ----------------------------------------------------------------------------------------

def _rank0_model(case: Case) -> nn.Module:
    torch.manual_seed(case.seeded(0))
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)  # buffers that must be saved too
    return model


def _probe_rank0(answer: dict, *, case: Case) -> dict:
    save_on_rank0 = answer["save_on_rank0"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pt")

        def work(rank: int) -> int:
            model = DDP(_rank0_model(case))
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


def _judge_rank0(seen: dict, *, case: Case) -> str:
    saves, state = seen["saves"], seen["state"]
    if not (isinstance(saves, list) and len(saves) == 2 and all(isinstance(s, int) for s in saves)):
        raise WireError("malformed save counts")
    if saves[1]:
        fail("every-rank-saves", observed=f"rank 1 called torch.save {saves[1]} time(s)", expected="rank 0 only",
             cause="every rank writes the same file at the same time: wasted I/O, and on a shared filesystem "
             "interleaved, torn writes", where="if dist.get_rank() == 0: torch.save(...)")
    if saves[0] != 1 or state == "missing":
        fail("rank0-did-not-save", observed=f"rank 0 called torch.save {saves[0]} time(s); the file is "
             f"{'missing' if state == 'missing' else 'there'}", expected="one save, on rank 0",
             cause="the rank test is inverted, or the path not used", where="the condition around torch.save")
    if isinstance(state, str) and state.startswith("refused"):
        fail("not-weights-only-loadable", observed=f"the saved file is {state}", expected="a state dict",
             cause="the module object was pickled instead of its state_dict()", where="what torch.save receives")
    if not isinstance(state, dict):
        fail("not-a-state-dict", observed=f"the file holds {describe(state)}", expected="a dict of tensors",
             cause="something other than model.module.state_dict() saved", where="what torch.save receives")
    want = _rank0_model(case).state_dict()
    if any(k.startswith("module.") for k in state["keys"]):
        fail("module-prefix", observed=f"saved keys {state['keys'][:2]}...", expected=f"{list(want)[:2]}...",
             cause="the DDP wrapper's state_dict was saved: every key gains 'module.', and the plain model cannot "
             "load it strictly", where="save ddp_model.module.state_dict()")
    if state["keys"] != list(want) or not close_tensors(state["values"], list(want.values()), atol=1e-6, rtol=1e-5):
        fail("wrong-content", observed=f"saved keys {state['keys'][:3]}...", expected=f"{list(want)[:3]}... with the "
             "model's weights and buffers", cause="another object, or parameters only (buffers dropped)",
             where="ddp_model.module.state_dict()")
    return "rank 0 alone saves the unwrapped state dict, buffers included"


_RANK0_SOLUTION = '''import torch
import torch.distributed as dist


def save_on_rank0(ddp_model, path):
    if dist.get_rank() == 0:
        torch.save(ddp_model.module.state_dict(), path)
'''

add(
    Drill(
        id="checkpointing-rank0-save",
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
        solution=_RANK0_SOLUTION,
        hints=("Every rank holds the same weights: how many copies of the file do you need?",
               "DDP wraps the model: its own state_dict lives in ddp_model.module.",
               "if dist.get_rank() == 0: torch.save(ddp_model.module.state_dict(), path)"),
        probe=_probe_rank0,
        judge=_judge_rank0,
        wrong_answers=(
            (_RANK0_SOLUTION.replace("ddp_model.module.state_dict()", "ddp_model.state_dict()"), "module-prefix"),
            ("import torch\n\n\ndef save_on_rank0(ddp_model, path):\n"
             "    torch.save(ddp_model.module.state_dict(), path)\n", "every-rank-saves"),
            (_RANK0_SOLUTION.replace("ddp_model.module.state_dict()", "ddp_model.module"), "not-weights-only-loadable"),
        ),
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


def _legacy_contents(case: Case) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    gen = torch.Generator().manual_seed(case.seeded(0))
    state = {"weight": torch.randn(3, 4, generator=gen), "bias": torch.randn(3, generator=gen)}
    args = {"lr": round(float(torch.rand((), generator=gen)) / 10, 6), "epochs": 5 + case.seeded(0) % 20,
            "name": f"run-{case.seeded(0)}"}
    return state, args


def _probe_legacy(answer: dict, *, case: Case) -> dict:
    import argparse

    state, args = _legacy_contents(case)
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


def _judge_legacy(seen: dict, *, case: Case) -> str:
    state, args = _legacy_contents(case)
    if seen.get("tripped") is not False:
        fail("runs-pickled-code", observed="loading a downloaded checkpoint ran a function its pickle named",
             expected="the hostile file refused (UnpicklingError), nothing run",
             cause="weights_only=False (or pickle) unpickles anything: a checkpoint can run arbitrary code the "
             "moment it is loaded", where="keep weights_only=True; allow only the one type the old file needs")
    if "refused" in seen:
        fail("refuses-legit-checkpoint", observed=f"loading the old checkpoint failed: {seen['refused']}",
             expected="the old checkpoint loaded, its argparse.Namespace included",
             cause="weights_only=True refuses every global that is not allowlisted, argparse.Namespace included",
             where="with torch.serialization.safe_globals([argparse.Namespace]): torch.load(path, "
             "weights_only=True)")
    if seen.get("hostile") == "loaded":
        fail("hostile-loaded", observed="the downloaded checkpoint loaded without an error",
             expected="an UnpicklingError", cause="a global allowed that should not be",
             where="the allowlist passed to safe_globals")
    model, loaded_args = seen.get("model"), seen.get("args")
    if not isinstance(model, dict) or list(model) != list(state) or not close_tensors(
            list(model.values()), list(state.values()), atol=1e-6, rtol=1e-5):
        fail("wrong-content", observed=f"the loaded model state is {describe(model)}", expected="the saved tensors",
             cause="the file's contents changed on the way", where="return the loaded dict as it is")
    if loaded_args != args:
        fail("wrong-content", observed=f"the loaded args are {loaded_args}", expected=f"argparse.Namespace({args})",
             cause="the Namespace was converted or dropped", where="return the loaded dict as it is")
    return "the old checkpoint loads with exactly one allowlisted type; a hostile pickle is refused"


_LEGACY_SOLUTION = '''import argparse

import torch


def load_legacy(path):
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, weights_only=True)
'''

add(
    Drill(
        id="checkpointing-safe-legacy-load",
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
        solution=_LEGACY_SOLUTION,
        hints=("weights_only=False would load it, and anything else too. What does the error message suggest instead?",
               "Allowlist exactly the one type: torch.serialization.safe_globals([argparse.Namespace]) around "
               "torch.load(path, weights_only=True)."),
        probe=_probe_legacy,
        judge=_judge_legacy,
        wrong_answers=(
            ("import torch\n\n\ndef load_legacy(path):\n    return torch.load(path, weights_only=False)\n",
             "runs-pickled-code"),
            ("import torch\n\n\ndef load_legacy(path):\n    return torch.load(path, weights_only=True)\n",
             "refuses-legit-checkpoint"),
            ("import pickle\n\nimport torch\n\n\ndef load_legacy(path):\n"
             "    return torch.load(path, weights_only=False, pickle_module=pickle)\n", "runs-pickled-code"),
        ),
    )
)
