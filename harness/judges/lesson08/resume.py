"""08-resume, the judge.

The checkpoint holds the whole state, loading it is safe and restores it exactly, and the resumed run
ends with the weights of the run that never stopped (both checked against a replay of the reference run).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.checks.lesson08.common import as_data
from harness.checks.lesson08.resume import (
    PARTS,
    ResumeSetting,
    build_run,
    resume_setting,
    snapshot,
    train_reference_epoch,
)
from harness.contract.case import Case
from harness.contract.compare import (
    close_values,
    isclose_number,
    malformed,
    max_state_difference,
    real,
    same_number,
    same_values,
)
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import describe
from harness.judges.lesson08.common import _helper_note, _same
from harness.judges.lesson08.writes import judge_writes


def _reference_resume(setting: ResumeSetting) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference run, replayed from the case (a few dozen steps of a tiny model): its state when the
    checkpoint is taken, and its final weights, as data."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the probe's reduction order
    try:
        with torch.random.fork_rng(devices=[]):
            run = build_run(setting.seed, setting.data_seed, setting.epochs)
            for _ in range(setting.stop_at):
                train_reference_epoch(run)
            saved = as_data(snapshot(run))
            for _ in range(setting.stop_at, setting.epochs):
                train_reference_epoch(run)
            return saved, as_data(run.model.state_dict())
    finally:
        torch.set_num_threads(threads)


# Not the floor's: a walk over nested checkpoint data (dicts, lists, numbers); each leaf is compared by the floor.
def _close_data(a: Any, b: Any) -> bool:
    """Nested data equal up to float rounding (a replay on another machine may round differently)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.is_floating_point():
            return close_values(a, b, rtol=1e-4, atol=1e-6, expected_nan=True)
        return same_values(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close_data(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close_data(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return isclose_number(a, b, rel_tol=1e-5, abs_tol=1e-9, expected_nan=True)
    return type(a) is type(b) and a == b


def _judge_contents(seen: dict[str, Any], saved: dict[str, Any], setting: ResumeSetting) -> None:
    """The checkpoint read back: weights_only-loadable, every part, the RNG state of the moment, the counters."""
    if seen["refused"] is not None:
        fail(
            "not-weights-only",
            observed=f"torch.load(path, weights_only=True) refuses the checkpoint: {seen['refused']}",
            expected="only tensors and plain values (state dicts, numbers, the dict from capture_rng_state())",
            cause="a whole object (model, optimizer, generator) saved instead of its state",
            where="save_checkpoint: model.state_dict(), generator.get_state(), ...",
        )
    checkpoint = seen["checkpoint"]
    if not isinstance(checkpoint, dict):
        fail(
            "model-not-restored",
            observed=f"the checkpoint holds {describe(checkpoint)}, not a dict",
            expected="a dict with 'model', 'optimizer', 'scheduler', 'scaler', 'rng', 'data_generator', 'epoch' "
            "and 'best_metric'",
            cause="save_checkpoint saves a single state instead of a dict of them",
            where="save_checkpoint",
        )
    for key, (code, what) in PARTS.items():
        if key not in checkpoint:
            fail(
                code,
                observed=f"the checkpoint has no {key!r} entry (it has {sorted(checkpoint)})",
                expected=f"{key!r}: {what}",
                cause=f"save_checkpoint leaves out {key!r}, so a resumed run cannot continue exactly",
                where="save_checkpoint",
            )
    rng = checkpoint["rng"]
    if not (isinstance(rng, dict) and _same(rng.get("torch"), saved["rng"])) and not _same(rng, saved["rng"]):
        fail(
            "rng-not-restored",
            observed="the checkpoint's 'rng' entry does not hold the torch RNG state at the time of saving",
            expected="capture_rng_state() (or at least torch.get_rng_state()) captured inside save_checkpoint",
            cause="RNG state captured at another moment, or not at all",
            where="save_checkpoint: 'rng': capture_rng_state()",
        )
    for key in ("epoch", "best_metric"):
        value = checkpoint.get(key)
        wanted = setting.stop_at if key == "epoch" else setting.best_metric
        number = real(value)
        if not same_number(number, wanted):
            fail(
                "counters-not-restored",
                observed=f"the checkpoint's {key!r} is {value!r}",
                expected=f"{wanted!r}, the value passed to save_checkpoint",
                cause=f"{key} not saved, or saved under another name",
                where="save_checkpoint",
            )


def _judge_restored(result: Any, saved: dict[str, Any], setting: ResumeSetting) -> None:
    """What load_checkpoint put into freshly built objects, compared with the reference run's state."""
    if not isinstance(result, dict) or not isinstance(result.get("restored"), dict):
        malformed(f"the resume's report: {describe(result)}")
    counters = result.get("counters")
    epoch, best_metric = setting.stop_at, setting.best_metric
    if (
        not isinstance(counters, dict) or counters.get("epoch") != epoch
        or not same_number(real(counters.get("best_metric")), best_metric)
    ):
        fail(
            "counters-not-restored",
            observed=f"load_checkpoint returned {counters!r}",
            expected=f"{{'epoch': {epoch}, 'best_metric': {best_metric}}}: where to continue and the best so far",
            cause="the counters are not returned from the checkpoint",
            where="the return statement of load_checkpoint",
        )
    restored = result["restored"]
    if _advanced_after_restore(restored.get("rng"), saved["rng"]):
        fail(
            "rng-not-restored",
            observed="after load_checkpoint the global RNG state holds the saved state's seed and nearly all of its "
            "state, moved on by a few draws: it was restored, then advanced by a draw (torch.rand, randn, a "
            "dropout forward, a model built) before load_checkpoint returned",
            expected="the RNG state exactly as saved when load_checkpoint returns",
            cause="a draw from the global RNG after restore_rng_state: the next epoch's dropout masks and "
            "random augmentations come from a state the run that never stopped did not have",
            where="load_checkpoint: restore the RNG state last, with nothing drawing from it afterwards",
            hint="What runs in load_checkpoint after restore_rng_state? Anything that draws a random number "
            "moves the state you just restored.",
        )
    for key, (code, what) in PARTS.items():
        if not _close_data(restored.get(key), saved[key]):
            fail(
                code,
                observed=f"after load_checkpoint into freshly built objects, {what} differ from the saved ones",
                expected="every part of the run restored exactly",
                cause=f"load_checkpoint does not restore {key!r} (load_state_dict / set_state / restore_rng_state)",
                where="load_checkpoint",
            )


def _advanced_after_restore(restored: Any, saved: Any) -> bool:
    """Whether a CPU RNG state is the saved one moved on by a few draws: it differs, yet keeps the saved initial
    seed (its first 8 bytes) and at least 90% of its bytes (a few draws change only the Mersenne Twister's
    position; a state seeded otherwise, or never restored, shares about half its bytes by chance)."""
    if not (isinstance(restored, torch.Tensor) and isinstance(saved, torch.Tensor)
            and restored.dtype == saved.dtype == torch.uint8 and restored.shape == saved.shape
            and saved.numel() > 8) or same_values(restored, saved):
        return False
    return same_values(restored[:8], saved[:8]) and (restored == saved).float().mean().item() >= 0.9


def _judge_atomic(after_crash: Any, checkpoint: Any) -> None:
    """The checkpoint survived a later save that crashed half way: what the file holds is still the first save."""
    if not isinstance(after_crash, dict):
        malformed(f"the file after the crashed save: {describe(after_crash)}")
    content = after_crash.get("file")
    if _same(content, checkpoint):
        # a write that survives the Python exception (an except that repairs it) but not a kill
        judge_writes(after_crash.get("writes"), during="a later save_checkpoint that raised half way")
        return
    note = _helper_note(after_crash)
    fail(
        "not-atomic",
        observed="a later save_checkpoint that raised half way through writing left the checkpoint "
        + ("unreadable" if isinstance(content, str) else "missing" if content is None
           else "holding something else than the previous checkpoint"),
        expected="the previous checkpoint, intact: the new file replaces it only once it is complete",
        cause=note or "torch.save straight onto path (it empties the old file before the new one is complete)",
        where="atomic_save" if note else "save_checkpoint: write with your atomic_save (a temporary file, then "
        "os.replace)",
    )


@judges(
    "08-resume",
    hints=Hints(
        nudge="A resumed run continues exactly only if *everything* that influences the next step is restored: "
        "weights, optimizer moments, scheduler position, scaler, RNG states (dropout) and the data order.",
        concept="Save each object's state_dict(), capture_rng_state() and generator.get_state() with the "
        "counters; load with weights_only=True and give each part back to its object.",
        solution="save: atomic_save({'model': model.state_dict(), 'optimizer': ..., 'scheduler': ..., 'scaler': "
        "..., 'rng': capture_rng_state(), 'data_generator': generator.get_state(), 'epoch': epoch, "
        "'best_metric': best_metric}, path). load: torch.load(path, weights_only=True), load_state_dict on each "
        "object, restore_rng_state, generator.set_state; return {'epoch': ..., 'best_metric': ...}",
        section="7. Exact resume",
    ),
    requires={
        "not-weights-only": Requirement(
            "the checkpoint holds tensors and plain values only (it loads with weights_only=True)",
            hint="Does your checkpoint hold a whole object (a model, a generator) instead of its state?"),
        "model-not-restored": Requirement(
            "the checkpoint is a dict whose 'model' entry restores the weights",
            hint="Is 'model': model.state_dict() in the dict you save, and loaded back into the model?"),
        "optimizer-not-restored": Requirement(
            "the optimizer state is saved and restored",
            hint="Adam keeps two moment estimates per weight: are they in your checkpoint, and loaded back?"),
        "scheduler-not-restored": Requirement(
            "the scheduler state is saved and restored",
            hint="Where in the schedule is the resumed run? Is the scheduler's step count saved and loaded?"),
        "scaler-not-restored": Requirement(
            "the GradScaler state is saved and restored",
            hint="The scaler has a scale and a growth counter: are they saved and loaded?"),
        "rng-not-restored": Requirement(
            "the global RNG states of the moment of saving are saved, and restored last",
            hint="Which dropout masks will the resumed run draw? Is the RNG state saved, restored, and not "
            "drawn from after restoring?"),
        "data-order-not-restored": Requirement(
            "the DataLoader generator's state is saved and restored",
            hint="Which batches come next after resuming? The loader shuffles with its own generator."),
        "counters-not-restored": Requirement(
            "epoch and best_metric are saved, and load_checkpoint returns them",
            hint="What does your load_checkpoint return, and where do the values come from?"),
        "unsafe-load": Requirement(
            "load_checkpoint reads with torch.load(..., weights_only=True)",
            hint="What can a downloaded .pt file do when you unpickle it without restrictions?"),
        "resume-crashed": Requirement(
            "load_checkpoint runs on the checkpoint save_checkpoint wrote, in a fresh process",
            hint="Read the error: which key or name does your load_checkpoint expect that is not there?"),
        "weights-diverged": Requirement(
            "saving leaves the run untouched, and the resumed run ends with the weights of the run that never "
            "stopped",
            hint="Does anything in save_checkpoint or load_checkpoint draw random numbers or change an object?"),
        "not-atomic": Requirement(
            "save_checkpoint writes atomically: a save that fails half way leaves the previous checkpoint intact",
            hint="What is left in path when torch.save fails half way through writing into it? Which function "
            "of this lesson writes a file atomically?"),
        "cannot-rebuild": Requirement(
            "save_checkpoint and load_checkpoint are plain def functions, using modules and other such functions",
            hint="The check re-creates your functions in a fresh process from their source: do they use a global "
            "built at run time (a model, a tensor, a lambda, an instance), which has no source to re-run?"),
    },
)
def judge_resume(seen: dict, *, case: Case) -> str:
    """The checkpoint holds the whole state, loading it is safe and restores it exactly, and the resumed run
    ends with the weights of the run that never stopped (both checked against a replay of the reference run)."""
    setting = resume_setting(case)
    saved, final_reference = _reference_resume(setting)
    _judge_contents(seen, saved, setting)
    if seen["unsafe_ran"] is not False:
        fail(
            "unsafe-load",
            observed="loading a checkpoint that hides a pickled call ran that call (it created a file)",
            expected="torch.load(path, weights_only=True): it refuses anything but tensors and plain values",
            cause="weights_only=False: unpickling can run any code the file's author chose",
            where="the torch.load call in load_checkpoint",
        )
    where = "in this process with freshly built objects" if case.hidden else "in a fresh process"
    if seen["restored"] is not None:  # compare first: a crash after a bad restore is best explained by the restore
        _judge_restored(seen["restored"], saved, setting)
    if seen["error"] is not None or seen["restored"] is None:
        fail(
            "resume-crashed",
            observed=f"resuming {where} failed: {seen['error']}",
            expected="load_checkpoint restores the run and training continues",
            cause="load_checkpoint expects something the checkpoint does not hold, or uses a name defined elsewhere",
            where="load_checkpoint (the fresh process sees only it, its helpers and the modules they import)",
        )
    stop_at, epochs = setting.stop_at, setting.epochs
    drift = max_state_difference(seen["continuous"], final_reference)
    if drift > 1e-4:
        fail(
            "weights-diverged",
            observed=f"the run that never stopped ended {drift:.3g} away from the check's replay of the same run",
            expected="save_checkpoint leaves the run it saves untouched",
            cause="save_checkpoint changes the training: it draws random numbers or modifies an object it saves",
            where="save_checkpoint",
        )
    worst = max_state_difference(seen["final"], seen["continuous"])  # the continuous run was verified above
    if worst > 0:
        fail(
            "weights-diverged",
            observed=f"after resuming at epoch {stop_at} of {epochs}, the final weights differ from the run that "
            f"never stopped by up to {worst:.3g}",
            expected="identical weights",
            cause="something that influences training is not in the checkpoint or not restored in the right order",
            where="save_checkpoint and load_checkpoint",
        )
    judge_writes(seen.get("writes"), during=f"save_checkpoint after epoch {stop_at}")
    _judge_atomic(seen["after_crash"], seen["checkpoint"])
    return f"stopped after epoch {stop_at} of {epochs}, resumed {where}: final weights identical to the continuous run"
