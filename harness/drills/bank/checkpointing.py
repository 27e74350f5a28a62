"""Drills on checkpointing: complete checkpoints, exact resume, portable state dicts, safe loading."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn

from harness.checks.core import fail
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train_epochs(model, optimizer, scheduler, first: int, last: int) -> None:
    for _ in range(first, last):
        x = torch.randn(32, 6)  # drawn from the global RNG: resuming must restore it
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def _check_resume(ns: dict) -> str:
    save, load = ns["save_checkpoint"], ns["load_checkpoint"]
    model, optimizer, scheduler = _setup(0)
    _train_epochs(model, optimizer, scheduler, 0, 6)
    reference = [p.detach().clone() for p in model.parameters()]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        model, optimizer, scheduler = _setup(0)
        _train_epochs(model, optimizer, scheduler, 0, 3)
        save(path, model, optimizer, scheduler, 3)
        torch.manual_seed(12345)  # a fresh process would start from another RNG state
        fresh_model, fresh_opt, fresh_sched = _setup(99)
        try:
            epoch = load(path, fresh_model, fresh_opt, fresh_sched)
        except Exception as error:
            if "weights_only" in str(error) or "Unsupported global" in str(error):
                fail("not-weights-only-loadable", observed=f"loading failed: {str(error)[:120]}",
                     expected="a checkpoint of tensors and plain values that loads with weights_only=True",
                     cause="a pickled object (a whole module or optimizer, a lambda) saved instead of state dicts",
                     where="save state_dict()s, not objects")
            raise
        if epoch != 3:
            fail("wrong-epoch", observed=f"load returned epoch {epoch}", expected="3",
                 cause="the counter was not saved", where="save and return the epoch")
        contents = torch.load(path, weights_only=True)
        text = repr(contents.keys()) if isinstance(contents, dict) else ""
        _train_epochs(fresh_model, fresh_opt, fresh_sched, 3, 6)
    resumed = [p.detach() for p in fresh_model.parameters()]
    if all(torch.equal(a, b) for a, b in zip(reference, resumed, strict=True)):
        return "resumed training is bitwise identical to the uninterrupted run"
    if not fresh_opt.state or int(next(iter(fresh_opt.state.values()))["step"]) != 6:
        part = "optimizer"
    elif fresh_sched.last_epoch != 6:
        part = "scheduler"
    else:
        part = "rng"
    fail(f"missing-{part}-state",
         observed=f"the resumed run diverges from the uninterrupted one (checkpoint keys: {text})",
         expected="identical weights after resuming",
         cause={"scheduler": "the scheduler state was not saved/restored: the LR schedule restarts",
                "optimizer": "the optimizer state (Adam's moments and step count) was not saved/restored",
                "rng": "the RNG states were not saved/restored: the resumed run draws different data"}[part],
         where=f"add the {part} state to save_checkpoint and restore it in load_checkpoint")


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
        check=_check_resume,
        wrong_answers=(
            _CKPT_SOLUTION.replace('        "optimizer": optimizer.state_dict(),\n', "").replace(
                '    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""),
            _CKPT_SOLUTION.replace('        "scheduler": scheduler.state_dict(),\n', "").replace(
                '    scheduler.load_state_dict(checkpoint["scheduler"])\n', ""),
            _CKPT_SOLUTION.replace('        "rng": torch.get_rng_state(),\n', "").replace(
                '    torch.set_rng_state(checkpoint["rng"])\n', ""),
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
        starter=_CKPT_SOLUTION.replace('        "optimizer": optimizer.state_dict(),\n', "").replace(
            '    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""),
        solution=_CKPT_SOLUTION,
        hints=("Which object holds per-parameter running averages?", "Save and restore optimizer.state_dict()."),
        check=_check_resume,
        wrong_answers=(_CKPT_SOLUTION.replace('    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""),),
    )
)


def _check_strip(ns: dict) -> str:
    portable = ns["portable_state_dict"]
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    wrapped = {"module." + k: v for k, v in base.state_dict().items()}
    compiled = {"_orig_mod." + k: v for k, v in base.state_dict().items()}
    both = {"module._orig_mod." + k: v for k, v in base.state_dict().items()}
    odd = {"module.encoder.submodule.0.weight": torch.ones(1)}
    for name, state in (("DDP", wrapped), ("compiled", compiled), ("DDP of compiled", both),
                        ("plain", base.state_dict())):
        got = portable(dict(state))
        if list(got) != list(base.state_dict()):
            fail("prefix-left", observed=f"keys after stripping a {name} state dict: {list(got)[:3]}...",
                 expected=f"{list(base.state_dict())[:3]}...",
                 cause="only one wrapper's prefix removed, or removed anywhere "
                 "in the key instead of at the start", where="strip 'module.' and '_orig_mod.' prefixes repeatedly")
        fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        fresh.load_state_dict(got)  # strict: every key must match
    if list(portable(dict(odd))) != ["encoder.submodule.0.weight"]:
        fail("over-stripping", observed=f"{list(portable(dict(odd)))}", expected="['encoder.submodule.0.weight']",
             cause="str.replace removes 'module.' inside names too", where="remove prefixes only at the start")
    return "strips DDP and torch.compile prefixes, only at the start of keys"


add(
    Drill(
        id="checkpointing-portable-state-dict",
        title="Portable state dicts: no module. or _orig_mod. prefixes",
        kind="write",
        topics=("checkpointing", "ddp"),
        difficulty=1,
        prompt="Write portable_state_dict(state) that removes the 'module.' (DDP) and '_orig_mod.' (torch.compile) "
        "prefixes from the start of every key, in any combination, so that the plain model loads it strictly.",
        entry="portable_state_dict",
        starter="def portable_state_dict(state):\n    raise NotImplementedError\n",
        solution=(
            "def portable_state_dict(state):\n    clean = {}\n    for key, value in state.items():\n"
            "        while key.startswith(('module.', '_orig_mod.')):\n            key = key.split('.', 1)[1]\n"
            "        clean[key] = value\n    return clean\n"
        ),
        hints=("Prefixes can stack: DDP around a compiled model gives 'module._orig_mod.'.",
               "Loop: while key.startswith(('module.', '_orig_mod.')): key = key.split('.', 1)[1]"),
        check=_check_strip,
        wrong_answers=(
            "def portable_state_dict(state):\n"
            "    return {k.replace('module.', '').replace('_orig_mod.', ''): v for k, v in state.items()}\n",
            "def portable_state_dict(state):\n    return {k.removeprefix('module.'): v for k, v in state.items()}\n",
        ),
    )
)


def _weights_only_experiment() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        torch.save(nn.Linear(2, 2), path)  # a whole pickled module
        try:
            torch.load(path, weights_only=True)
        except Exception as error:
            print(f"weights_only=True refuses a pickled module: "
                  f"{type(error).__name__}: {str(error).splitlines()[0][:100]}")
        torch.save(nn.Linear(2, 2).state_dict(), path)
        print(f"a state dict loads: keys {list(torch.load(path, weights_only=True))}")
    print("unpickling can run arbitrary code; weights_only restricts loading to tensors and plain containers.")


add(
    multiple_choice(
        id="checkpointing-weights-only",
        title="Why load checkpoints with weights_only=True?",
        topics=("checkpointing",),
        difficulty=1,
        prompt="Why load with torch.load(path, weights_only=True)?\n  a) it is faster\n"
        "  b) a pickled checkpoint can run arbitrary code when loaded; "
        "weights_only only rebuilds tensors and plain containers\n"
        "  c) it skips the optimizer state\n  d) it loads onto the GPU\n",
        correct="b",
        explanation="unpickling executes code; weights_only is the safe loader",
        hints=("What can a pickle do when it is loaded?", "pickle's __reduce__ can call any function."),
        wrong=("a", "c"),
        experiment=_weights_only_experiment,
    )
)
