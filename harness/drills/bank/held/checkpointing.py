"""The bank side of held drills of checkpointing whose answer passes a graded exercise and which lesson 11's notebook
does not hold: checkpointing-resume-diverges, checkpointing-full-training-state, checkpointing-portable-state-dict,
checkpointing-atomic-save.

Their prompts, starters and hints answer that exercise too nearly, so a graded student tree ships neither this module
nor their index entries (`harness.grading.held_drills`); their probes stay in the topic's module.
"""

from __future__ import annotations

from harness.drills.bank.checkpointing import _make_resume_probe, _probe_atomic, _probe_strip
from harness.drills.core import Drill, add

NO_OPTIMIZER = '''import torch


def save_checkpoint(path, model, optimizer, scheduler, epoch):
    torch.save({
        "model": model.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "rng": torch.get_rng_state(),
    }, path)


def load_checkpoint(path, model, optimizer, scheduler):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["epoch"]
'''


_FULL_STARTER = '''import torch

# The training loop (not yours to change): per epoch, a batch drawn with `generator`, a model with
# dropout (torch's global RNG), SGD with momentum, a StepLR scheduler and a GradScaler
# (scale, backward, unscale_, clip, step, update). Resuming must replay it exactly.


def save_checkpoint(path, model, optimizer, scheduler, scaler, generator, epoch):
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "rng": torch.get_rng_state(),
    }, path)


def load_checkpoint(path, model, optimizer, scheduler, scaler, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["epoch"]
'''


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
        starter=NO_OPTIMIZER,
        hints=("Which object holds per-parameter running averages?", "Save and restore optimizer.state_dict()."),
        probe=_make_resume_probe(full=False),
    )
)


add(
    Drill(
        id="checkpointing-full-training-state",
        self_check=True,
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
        hints=("List every object whose state changes during an epoch: the model, the optimizer... and four more.",
               "The schedule, the scaler's scale, and two random streams: torch's global RNG (dropout) and the "
               "data's own generator.",
               "Add scheduler.state_dict(), scaler.state_dict() and generator.get_state() to the checkpoint, and "
               "restore them with load_state_dict / set_state."),
        probe=_make_resume_probe(full=True),
    )
)


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
        hints=("Prefixes can stack: DDP around a compiled model gives 'module._orig_mod.'.",
               "Loop: while key.startswith(('module.', '_orig_mod.')): key = key.split('.', 1)[1]"),
        probe=_probe_strip,
    )
)


add(
    Drill(
        id="checkpointing-atomic-save",
        title="A checkpoint that a crash cannot tear",
        kind="write",
        topics=("checkpointing",),
        difficulty=2,
        prompt="Write save_atomic(obj, path): save obj with torch.save so that a crash half-way through the write "
        "(disk full, a preempted job) never leaves path holding a partial file: until the new checkpoint is "
        "complete, path keeps the previous one. The failure must still reach the caller. (A self-check: what a "
        "save does to the disk is read back inside your answer's own process, so its pass does not count in a "
        "mock interview.)",
        entry="save_atomic",
        starter="import os\nimport tempfile\nfrom pathlib import Path\n\nimport torch\n\n\n"
        "def save_atomic(obj, path):\n    raise NotImplementedError\n",
        hints=("Never write into the file you want to keep. Where else can the bytes go first?",
               "Write a temporary file in the same folder, then os.replace(tmp, path): a rename on one filesystem is "
               "atomic, and it replaces an existing file in one step.",
               "tempfile.mkstemp(dir=path.parent), torch.save into it, os.replace; on an exception remove the "
               "temporary file and re-raise."),
        probe=_probe_atomic,
        self_check=True,
    )
)

