"""09-save-rank0, the judge.

Only rank 0's folder may get the file, before any rank returns; it must hold the model after its step.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson09.common import MODEL_SEED, WORLD, detached_state, make_model
from harness.checks.lesson09.save_rank0 import CHECKPOINT_NAME, save_epoch, save_model_step
from harness.contract.case import Case
from harness.contract.compare import close_state, malformed
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import type_name
from harness.judges.lesson09.common import TOLERANCE, _hang_row, _ranks, _same_layout


@judges(
    "09-save-rank0", unjudged=("checkpoint/optimizer/*",),  # only its presence is checked
    hints=Hints(
        nudge="Only one process should write the file, and the others must not go on before it exists.",
        concept="rank 0 does the once-only work; a dist.barrier() that every rank calls after it holds the others "
        "until it is done",
        solution="if dist.get_rank() == 0: torch.save({'model': model.module.state_dict(), "
        "'optimizer': optimizer.state_dict(), 'epoch': epoch}, path); then dist.barrier() on every rank",
        section="5. Rank 0's duties, and barriers"),
    requires={
        "saved-on-every-rank": Requirement("only rank 0 writes", hint="Several ranks wrote the file: who should?"),
        "not-saved-on-rank0": Requirement("rank 0 writes the checkpoint at `path`",
                                          hint="Rank 0's folder has no file at the path it was given: which rank "
                                          "saved, and under which name?"),
        "missing-barrier": Requirement("no rank returns before the file is complete",
                                       hint="Rank 1 returned while rank 0 had not yet written: what makes it wait, "
                                       "and until when?"),
        "incomplete-checkpoint": Requirement("the checkpoint holds 'model', 'optimizer' and 'epoch'",
                                             hint="A key is missing from the saved dict: compare it with the text."),
        "wrapped-state-dict": Requirement("'model' is the unwrapped model's state_dict",
                                          hint="The saved keys start with 'module.': which model's state_dict is it?"),
        "wrong-state-dict": Requirement("'model' holds the model's current state_dict",
                                        hint="'model' is not the model's state after its step: what did you save?"),
        "wrong-epoch": Requirement("'epoch' is the epoch passed in",
                                   hint="The saved epoch is not the argument: save it as it was given."),
        **_hang_row("the barrier"),
    },
)
def judge_save_rank0(seen: dict, *, case: Case) -> str:
    """Only rank 0's folder may get the file, before any rank returns; it must hold the model after its step."""
    files = [_string_list(names) for names in _ranks(seen["files"])]
    written = [r for r in range(WORLD) if files[r]]
    if written != [0]:
        if 0 in written:
            fail("saved-on-every-rank", observed=f"ranks {written} each wrote a checkpoint",
                 expected="only rank 0 writes", cause="the save is not guarded: every rank writes the same "
                 "file (wasted I/O, and on a shared disk a corrupt file when writes interleave)",
                 where="if dist.get_rank() == 0: torch.save(...)")
        fail("not-saved-on-rank0", observed=f"files written by ranks {written or 'none'}",
             expected="rank 0 writes the checkpoint", cause="the guard selects the wrong rank, or nothing is saved",
             where="if dist.get_rank() == 0: torch.save(..., path)")
    checkpoint = seen["checkpoint"]
    if checkpoint is None:
        fail("not-saved-on-rank0", observed=f"rank 0 wrote {files[0]}, none of them at the path it was given",
             expected=f"the checkpoint at the path passed in ({CHECKPOINT_NAME!r})",
             cause="the file is saved under another name than `path`", where="torch.save(..., path)")
    called = _string_list(seen["rank1_collectives"])
    if not all(existed is True for existed in _ranks(seen["file_existed_on_return"])):
        if called:
            fail("missing-barrier", observed=f"rank 1 called {', '.join(f'dist.{name}()' for name in called)} and "
                 "still returned before rank 0 had written the checkpoint",
                 expected="every rank returns only once the file exists",
                 cause="the barrier comes before the save: it releases the ranks as soon as rank 0 reaches it, so rank "
                 "1 goes on while rank 0 is still writing",
                 where="move dist.barrier() after the guarded save (every rank calls it)")
        fail("missing-barrier", observed="rank 1 returned before rank 0 had written the checkpoint, without calling "
             "any collective", expected="every rank returns only once the file exists",
             cause="no barrier after the save: the other ranks race ahead (and may read a file that is not there yet)",
             where="dist.barrier() after the guarded save, on every rank")
    missing = [key for key in ("model", "optimizer", "epoch")
               if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        fail("incomplete-checkpoint",
             observed=f"keys {sorted(checkpoint)}" if isinstance(checkpoint, dict) else f"a {type_name(checkpoint)}",
             expected="'model', 'optimizer' and 'epoch'",
             cause="a resumable checkpoint needs all three", where="the dict passed to torch.save")
    saved = checkpoint["model"]
    if isinstance(saved, dict) and any(key.startswith("module.") for key in saved):
        fail("wrapped-state-dict", observed="model keys start with 'module.'", expected="the plain model's keys",
             cause="the DDP wrapper's state_dict was saved: it will not load into a plain model",
             where="save model.module.state_dict()")
    model = make_model(case.seeded(MODEL_SEED))
    save_model_step(model, torch.optim.SGD(model.parameters(), lr=0.1))
    reference = detached_state(model.state_dict())
    if not isinstance(saved, dict) or not _same_layout(saved, reference) or not close_state(
            saved, reference, rtol=TOLERANCE, atol=TOLERANCE, dtype=False):
        fail("wrong-state-dict", observed=f"'model' holds {_summary(saved, reference)}",
             expected=f"the model's state_dict after its step: keys {sorted(reference)}",
             cause="something other than the model's current state_dict was saved",
             where="'model': model.module.state_dict()")
    epoch = save_epoch(case)
    if not _holds_int(checkpoint["epoch"], epoch):
        fail("wrong-epoch", observed=f"epoch {checkpoint['epoch']!r}", expected=f"{epoch}",
             cause="the epoch passed in is not the one saved", where="'epoch': epoch")
    return "rank 0 alone writes a full checkpoint with the unwrapped model; the other ranks wait for it"


def _string_list(value: Any) -> list[str]:
    """A recorded list of file names, validated."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        malformed("expected a list of file names")
    return value


def _summary(value: Any, reference: dict[str, torch.Tensor]) -> str:
    """A saved state_dict, or what was saved instead, in a few words."""
    if not isinstance(value, dict):
        return f"a {type_name(value)}"
    if _same_layout(value, reference):
        return "the model's keys with other values"
    return f"keys {sorted(value)[:6]}"


def _holds_int(value: Any, number: int) -> bool:
    """Whether a saved value is `number`: an int, or a one-element tensor holding it."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and value.item() == number
    return isinstance(value, int) and not isinstance(value, bool) and value == number
