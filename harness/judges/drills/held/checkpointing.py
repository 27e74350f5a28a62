"""The held answers of the checkpointing drills: the solutions and planted wrong answers of
checkpointing-exact-resume and checkpointing-resume-diverges (one answer, which passes 11-exact-resume),
checkpointing-full-training-state (11-exact-resume's answer with a scaler and a generator added),
checkpointing-portable-state-dict (08-portable) and checkpointing-atomic-save (08-atomic-save).

Their judges are in `harness.judges.drills.checkpointing` (checkpointing-exact-resume's is joined there, lesson 11's
local check uses it; the others' are joined here, with their answers); a graded student tree does not ship this
module.
"""

from __future__ import annotations

import harness.judges.drills.checkpointing  # noqa: F401  (joins the judges first)
from harness.drills.bank.held.checkpointing import NO_OPTIMIZER
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.checkpointing import _judge_atomic, _judge_strip, _make_resume_judge
from harness.judges.drills.held.whys import add_answers

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


_PICKLED_OPTIMIZER = edited(_CKPT_SOLUTION,
                            ('"optimizer": optimizer.state_dict()', '"optimizer": optimizer'),
                            ('optimizer.load_state_dict(checkpoint["optimizer"])',
                             'optimizer.load_state_dict(checkpoint["optimizer"].state_dict())'))


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


add_answers(
    Answers(
        drill_id="checkpointing-exact-resume",
        solution=_CKPT_SOLUTION,
        wrong_answers=(
            (NO_OPTIMIZER, "missing-optimizer-state"),
            (edited(_CKPT_SOLUTION,
                    ('        "scheduler": scheduler.state_dict(),\n', ""),
                    ('    scheduler.load_state_dict(checkpoint["scheduler"])\n', "")), "missing-scheduler-state"),
            (edited(_CKPT_SOLUTION,
                    ('        "rng": torch.get_rng_state(),\n', ""),
                    ('    torch.set_rng_state(checkpoint["rng"])\n', "")), "missing-rng-state"),
            (edited(_CKPT_SOLUTION, ("weights_only=True", "weights_only=False")), "unsafe-load"),
            (edited(_CKPT_SOLUTION,
                    ('"model": model.state_dict()', '"model": model'),
                    ('model.load_state_dict(checkpoint["model"])',
                     'model.load_state_dict(checkpoint["model"].state_dict())')),
             "not-weights-only-loadable"),
        ),
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-resume-diverges",
        solution=_CKPT_SOLUTION,
        wrong_answers=(
            (edited(_CKPT_SOLUTION, ('    optimizer.load_state_dict(checkpoint["optimizer"])\n', "")),
             "missing-optimizer-state"),
            (_PICKLED_OPTIMIZER, "not-weights-only-loadable"),
        ),
        judge=_make_resume_judge(full=False),
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-portable-state-dict",
        solution=(
            "def portable_state_dict(state):\n    clean = {}\n    for key, value in state.items():\n"
            "        while key.startswith(('module.', '_orig_mod.')):\n            key = key.split('.', 1)[1]\n"
            "        clean[key] = value\n    return clean\n"
        ),
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
        judge=_judge_strip,
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-atomic-save",
        solution=_ATOMIC_SOLUTION,
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
        judge=_judge_atomic,
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
    return edited(source, *((line, "") for key in keys for line in lines[key]))


add_answers(
    Answers(
        drill_id="checkpointing-full-training-state",
        solution=_FULL_SOLUTION,
        wrong_answers=(
            (_without(_FULL_SOLUTION, "data_rng"), "missing-generator-state"),
            (_without(_FULL_SOLUTION, "scaler"), "missing-scaler-state"),
            (_without(_FULL_SOLUTION, "scheduler"), "missing-scheduler-state"),
            (edited(_FULL_SOLUTION,
                    ('        "rng": torch.get_rng_state(),\n', ""),
                    ('    torch.set_rng_state(checkpoint["rng"])\n', "")), "missing-rng-state"),
        ),
        judge=_make_resume_judge(full=True),
    )
)
