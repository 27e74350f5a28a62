"""The judge side of the checkpointing drills (`harness.drills.bank.checkpointing`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from harness.contract.case import Case
from harness.contract.compare import close_tensors, malformed, same_values
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.checkpointing import (
    atomic_save_states,
    legacy_contents,
    observe_resume,
    rank0_model,
    resume_kit,
    strip_inputs,
)
from harness.drills.core import Answers, add_judge, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _make_resume_judge(full: bool) -> Callable[..., str]:
    setup, train = resume_kit(full)

    def judge(seen: dict, *, case: Case) -> str:
        if not isinstance(seen.get("loads"), list):
            malformed("the torch.load calls' record is missing")
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
        want = observe_resume(reference)
        if seen["epoch"] != 3 or isinstance(seen["epoch"], bool):
            fail("wrong-epoch", observed=f"load_checkpoint returned {seen['epoch']!r}", expected="3, the epoch saved",
                 cause="the epoch counter was not saved, or not returned",
                 where="the epoch in the checkpoint, and what load_checkpoint returns")
        if not close_tensors(seen["after_load"], at_save, atol=1e-6, rtol=1e-5):
            fail("weights-not-restored", observed="right after load_checkpoint the model still has its fresh weights",
                 expected="the weights saved at epoch 3", cause="model.load_state_dict was not called (or on "
                 "another object)", where="what load_checkpoint does with the model's state")
        if seen["opt_step"] != want["opt_step"]:
            fail("missing-optimizer-state", observed=f"after resuming, the optimizer has taken {seen['opt_step']} "
                 f"steps in all", expected=f"{want['opt_step']} (3 before the checkpoint and 3 after)",
                 cause="the optimizer state (momentum buffers, Adam's moments and step count) was not "
                 "saved/restored: it starts again from zero",
                 where="what the checkpoint holds for the optimizer, and what is restored")
        if seen["sched_epoch"] != want["sched_epoch"]:
            fail("missing-scheduler-state", observed=f"the scheduler ends at epoch {seen['sched_epoch']}",
                 expected=f"epoch {want['sched_epoch']}", cause="the scheduler state was not saved/restored: the "
                 "learning-rate schedule restarts from its first epoch",
                 where="what the checkpoint holds for the scheduler, and what is restored")
        if full and seen["scale"] != want["scale"]:
            fail("missing-scaler-state", observed=f"the GradScaler's scale after resuming is {seen['scale']:g}",
                 expected=f"{want['scale']:g}, as in the run that never stopped",
                 cause="the scaler state was not saved/restored: it restarts from init_scale (with fp16, its "
                 "first steps overflow and are skipped)",
                 where="what the checkpoint holds for the scaler, and what is restored")
        if full and not same_values(seen["data_rng"], want["data_rng"], dtype=False):
            fail("missing-generator-state", observed="the data generator's state after resuming differs from the "
                 "uninterrupted run's", expected="the same batches as the run that never stopped",
                 cause="only torch's global RNG was saved: the data comes from its own torch.Generator, which "
                 "restarts from its seed", where="what the checkpoint holds for the data generator")
        if not same_values(seen["rng"], want["rng"], dtype=False):
            fail("missing-rng-state", observed="torch's global RNG state after resuming differs from the "
                 "uninterrupted run's", expected="the same random draws as the run that never stopped",
                 cause="the global RNG state was not saved/restored: the resumed run draws other "
                 + ("dropout masks" if full else "data"), where="what the checkpoint holds for torch's global RNG")
        if not close_tensors(seen["params"], want["params"], atol=1e-6, rtol=1e-5):
            fail("resume-diverges", observed="the resumed run's weights differ from the uninterrupted run's",
                 expected="identical weights after resuming", cause="some state is restored wrongly",
                 where="compare what save_checkpoint writes with what load_checkpoint restores")
        return "resumed training matches the uninterrupted run: weights, optimizer, schedule" + (
            ", scaler, data and dropout RNGs" if full else " and RNG")

    return judge


def _judge_strip(seen: dict, *, case: Case) -> str:
    base, variants = strip_inputs(case)
    outputs = seen["outputs"]
    if not isinstance(outputs, list) or len(outputs) != len(variants):
        malformed("portable_state_dict outputs missing")
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


def _judge_atomic(seen: dict, *, case: Case) -> str:
    states = atomic_save_states(case)
    path = seen["path"]
    if not isinstance(path, str) or not isinstance(seen["events"], list):
        malformed("the observation is not one the probe writes")
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
    renames = [e for e in seen["events"] if e[:1] in (["replace"], ["rename"]) and len(e) == 3 and e[2] == path
               and e[1] != path]  # os.replace(path, path) moves nothing
    if not holds(seen["held"], 0):
        fail("no-atomic-rename", observed="a reader that had path open before the save read "
             + (f"{seen['held']}" if isinstance(seen["held"], str) else "the new bytes") + ": the file was "
             "rewritten in place", expected="the reader keeps the old file: a rename puts a new file at path",
             cause="copying (shutil.copy) or rewriting the file is not atomic: a crash mid-copy tears it too",
             where="os.replace(tmp, path) (or Path(tmp).replace(path))")
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
    return ("a crash mid-write leaves the previous checkpoint intact; each save lands in one atomic rename "
            "(self-checked: the files were read back inside your answer's own process)")


def _judge_rank0(seen: dict, *, case: Case) -> str:
    saves, state = seen["saves"], seen["state"]
    if not (isinstance(saves, list) and len(saves) == 2 and all(isinstance(s, int) for s in saves)):
        malformed("save counts")
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
    want = rank0_model(case).state_dict()
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


def _judge_legacy(seen: dict, *, case: Case) -> str:
    state, args = legacy_contents(case)
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


add_judge("checkpointing-exact-resume", _make_resume_judge(full=False))


add_answers(
    choice_answers(
        "checkpointing-weights-only",
        options=(
            ("it loads faster, because it skips unpickling the Python objects in the file",
             "speed is not the point: it still unpickles, with an unpickler restricted to safe types"),
            ("it leaves out the optimizer state and the epoch, and keeps only the model's weights",
             "it loads everything made of tensors and plain containers, optimizer state dicts included"),
            ("unpickling can run any code; this allows only tensors and plain types",
             "a pickle's __reduce__ can call any function when loaded; weights_only refuses every global that is "
             "not on its allowlist, so a malicious or stale file fails loudly instead"),
            ("it maps every tensor onto the GPU the weights were saved from",
             "device placement is map_location's job; weights_only says nothing about devices"),
        ),
        key="c",
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-rank0-save",
        solution=_RANK0_SOLUTION,
        wrong_answers=(
            (edited(_RANK0_SOLUTION, ("ddp_model.module.state_dict()", "ddp_model.state_dict()")), "module-prefix"),
            ("import torch\n\n\ndef save_on_rank0(ddp_model, path):\n"
             "    torch.save(ddp_model.module.state_dict(), path)\n", "every-rank-saves"),
            (edited(_RANK0_SOLUTION, ("ddp_model.module.state_dict()", "ddp_model.module")),
             "not-weights-only-loadable"),
        ),
        judge=_judge_rank0,
    )
)


add_answers(
    Answers(
        drill_id="checkpointing-safe-legacy-load",
        solution=_LEGACY_SOLUTION,
        wrong_answers=(
            ("import torch\n\n\ndef load_legacy(path):\n    return torch.load(path, weights_only=False)\n",
             "runs-pickled-code"),
            ("import torch\n\n\ndef load_legacy(path):\n    return torch.load(path, weights_only=True)\n",
             "refuses-legit-checkpoint"),
            ("import pickle\n\nimport torch\n\n\ndef load_legacy(path):\n"
             "    return torch.load(path, weights_only=False, pickle_module=pickle)\n", "runs-pickled-code"),
        ),
        judge=_judge_legacy,
    )
)
