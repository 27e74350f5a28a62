"""Verdicts the answer cannot rewrite (issue 41, item 1).

The probe runs in the answer's own process, so an answer can rewrite what it sends: a prelude that wraps
`harness.contract.wire.encode` through `sys.modules` (no import) and sets every measurement (a module's mode, a
sync count, the calls a save made) to what a correct answer would show. Each drill below makes its symptom show
in values the judge recomputes, so the rewritten measurements change nothing; what cannot show in values is
marked self-checked (`Drill.self_check`, `SELF_CHECKED_CODES`) and left out of mock scores.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

from harness.contract import wire
from harness.contract.case import Case
from harness.contract.failure import CheckFailed
from harness.contract.protocol import refuse_nonfinite
from harness.drills.answer import load_answer
from harness.drills.checker import check_source
from harness.drills.core import all_drills, get_drill

# Failure codes that rest only on a measurement made in the answer's process (a call record, a hook count, a
# host-sync count): a prelude that rewrites the observation can hide them, so the drills whose point they are
# are self-checks, and a pass of any other drill claims them only as self-checked.
SELF_CHECKED_CODES = frozenset({"forbidden-call", "host-sync", "python-loop", "hooks-left", "hooks-left-on-error"})


def prelude(forge: str) -> str:
    """Answer text that rewrites the probe's observation before it is sent: `forge` is the body of
    `forge(seen)`, run on the observation's data just before `wire.encode` turns it into bytes."""
    body = "".join(f"    {line}\n" for line in forge.strip().splitlines())
    return ("import sys\n_wire = sys.modules['harness.contract.wire']\n_encode = _wire.encode\n\n\n"
            f"def _forge(seen):\n{body}\n\n"
            "def _forged(observation):\n    if isinstance(observation.get('seen'), dict):\n"
            "        _forge(observation['seen'])\n    return _encode(observation)\n\n\n_wire.encode = _forged\n\n\n")


def wrong(drill_id: str, code: str) -> str:
    """The drill's planted wrong answer that fails with `code`."""
    return next(source for source, want in get_drill(drill_id).wrong_answers if want == code)


NO_TRAIN_MODE = prelude("seen['training'] = [True] * len(seen['training'])")
ONE_SYNC_PER_STEP = prelude("for rank in seen['ranks']:\n    rank['syncs'] = 6")
NO_HOOKS = prelude("seen['hooks'] = 0\nseen['hooks_on_error'] = 0")
ATOMIC_EVENTS = prelude(
    "path = seen['path']\n"
    "seen['events'] = [e if e[:1] != ['save'] else ['save', path + '.tmp'] for e in seen['events']]\n"
    "seen['events'] += [['replace', path + '.tmp', path]]")

COPY_ONTO_TARGET = '''import os
import shutil
import tempfile
from pathlib import Path

import torch


def save_atomic(obj, path):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    shutil.copyfile(tmp, path)
    tmp.unlink()
'''


@pytest.mark.parametrize(("drill_id", "answer"), [
    ("loop-train-step", NO_TRAIN_MODE + wrong("loop-train-step", "not-train-mode")),
    ("ddp-accumulation-loop", ONE_SYNC_PER_STEP + wrong("ddp-accumulation-loop", "syncs-every-micro-step")),
    ("checkpointing-atomic-save", ATOMIC_EVENTS + COPY_ONTO_TARGET),
    ("checkpointing-atomic-save", COPY_ONTO_TARGET + "    os.replace(path, path)\n"),
], ids=["no-train-mode", "sync-every-micro-batch", "copy-with-forged-events", "copy-then-replace-onto-itself"])
def test_a_rewritten_measurement_cannot_pass_a_wrong_answer(drill_id, answer):
    result = check_source(get_drill(drill_id), answer, case=Case(seed=7))
    assert not result.passed, result.message


@pytest.mark.parametrize("drill_id", ["debugging-hooks-cleanup", "modules-layer-norm-from-scratch",
                                      "loop-adamw-from-scratch", "tensors-logsumexp", "sequences-label-smoothing"])
def test_a_drill_whose_point_only_the_answer_process_sees_is_a_self_check(drill_id):
    drill = get_drill(drill_id)
    assert drill.self_check and "self-check" in drill.prompt, drill.prompt


def test_a_self_checked_part_of_a_pass_says_so():
    result = check_source(get_drill("debugging-first-nonfinite"), get_drill("debugging-first-nonfinite").solution,
                          case=Case(seed=7))
    assert result.passed and "self-checked" in result.message, result.message


def test_a_forbidden_call_hidden_by_a_rewritten_record_does_not_claim_it_was_not_called():
    answer = prelude("seen['calls'] = {}") + (
        "import torch.nn.functional as F\n\n\ndef layer_norm(x, normalized_shape, weight, bias, eps=1e-5):\n"
        "    return F.layer_norm(x, normalized_shape, weight, bias, eps)\n")
    result = check_source(get_drill("modules-layer-norm-from-scratch"), answer, case=Case(seed=7))
    assert "without calling" not in result.message and "self-checked" in result.message, result.message


MEMORISED_FIRST_NONFINITE = '''import torch


def first_nonfinite(model, x):
    if not torch.isfinite(x).all():
        return "body.0"
    return "sharpen" if x.abs().max() > 100 else None
'''


def test_a_memorised_first_nonfinite_answer_fails_on_most_cases():
    drill = get_drill("debugging-first-nonfinite")
    passed = [check_source(drill, MEMORISED_FIRST_NONFINITE, case=Case(seed=seed)).passed for seed in range(4)]
    assert sum(passed) <= 1, passed  # names are drawn from pools of 4: one case in 16 draws these two


# --- The prelude against every planted wrong answer ----------------------------------------------------------
# A prelude needs no reference to forge what a correct answer shows everywhere: every leaf of the reference's
# observation that is the same on two cases (a mode flag, a count, a call list, a key name) it can write as a
# constant. The sweep below writes those leaves into each planted wrong answer's observation, as the prelude
# above can (it is applied here in the test's process, for speed), and the judge must still fail it.
#
# Still forgeable, named by what the verdict rests on, so their drills are self-checks (their prompt and pass say
# so, a mock interview does not score them) until the mistake shows in values. Process state: a mode, a grad or
# autocast flag, a flag the answer sets, what a load or a hook ran; no value the judge recomputes shows it.
# Constant answers: the right answer (key names, flags per epoch, a loader's settings) is the same on every
# case, so it can be memorised; the fix is to draw it from the case.
PROCESS_STATE = {
    ("amp-loop-three-bugs", "backward-inside-autocast"), ("amp-train-step", "backward-inside-autocast"),
    ("amp-train-step", "not-train-mode"), ("amp-train-step", "stale-gradients"),
    ("amp-loop-three-bugs", "scheduler-per-epoch"),
    ("autograd-custom-function", "not-custom-backward"), ("autograd-detach-target", "target-gets-gradient"),
    ("autograd-input-gradients", "input-mutated"), ("checkpointing-exact-resume", "unsafe-load"),
    ("checkpointing-full-training-state", "missing-scaler-state"), ("checkpointing-rank0-save", "every-rank-saves"),
    ("checkpointing-safe-legacy-load", "runs-pickled-code"), ("ddp-barrier-checkpoint", "every-rank-saves"),
    ("ddp-disjoint-shards", "uses-distributed-sampler"), ("ddp-disjoint-shards", "uses-global-rng"),
    ("debugging-detect-anomaly", "anomaly-left-on"), ("debugging-init-output-bias", "replaced-parameter"),
    ("export-fold-batchnorm", "mutated-input"), ("export-predict-inference-mode", "grad-tracked"),
    ("export-predict-inference-mode", "not-inference-mode"), ("export-serving-three-bugs", "grad-tracked"),
    ("export-serving-three-bugs", "unsafe-load"), ("export-state-dict-config", "unsafe-load"),
    ("finetuning-freeze-backbone", "backbone-requires-grad"), ("loop-eval-changes", "eval-builds-graph"),
    ("loop-eval-restores-mode", "forced-train-mode"), ("modules-freeze-backbone", "eval-does-not-freeze"),
    ("modules-freeze-backbone", "module-attribute-set"), ("modules-param-groups", "decay-left-to-default"),
    ("repro-seeded-split", "uses-global-rng"), ("tensors-sgd-in-place", "grad-not-cleared"),
    ("tensors-sgd-in-place", "requires-grad-lost"), ("performance-loader-settings", "workers-restarted"),
}
CONSTANT_ANSWERS = {
    ("finetuning-gradual-unfreeze", "head-frozen"),
    ("finetuning-gradual-unfreeze", "still-frozen"), ("finetuning-gradual-unfreeze", "unfrozen-too-early"),
    ("finetuning-param-groups", "wrong-optimizer"), ("performance-loader-settings", "pinned-on-cpu"),
    ("performance-loader-settings", "wrong-batches"),
}
STILL_FORGEABLE = PROCESS_STATE | CONSTANT_ANSWERS


@pytest.mark.parametrize(("drill_id", "code"), sorted(STILL_FORGEABLE))
def test_a_still_forgeable_wrong_answer_is_in_a_self_check_drill(drill_id, code):
    drill = get_drill(drill_id)
    assert code in {c for _, c in drill.wrong_answers}, f"{drill_id} has no wrong answer [{code}]"
    assert drill.self_check and "self-check" in drill.prompt, f"{drill_id} scores a pass a prelude can forge"


def test_a_self_check_drills_pass_says_it_is_one_and_a_scored_drills_does_not():
    passed = check_source(get_drill("amp-train-step"), get_drill("amp-train-step").solution, case=Case(seed=7))
    assert passed.passed and "[self-check]" in passed.message, passed.message
    scored = check_source(get_drill("loop-train-step"), get_drill("loop-train-step").solution, case=Case(seed=7))
    assert scored.passed and "self-check" not in scored.message, scored.message


def _observed(drill, source: str, case: Case):
    """What the probe sends for `source` on `case` (decoded as the judge gets it), or None if the answer raised."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            seen = drill.probe(load_answer(drill, source, "<answer>"), case=case)
            return wire.decode(wire.encode({"seen": seen}))["seen"]
        except Exception:  # a planted answer may raise on purpose: then there is nothing to forge
            return None


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and a.device.type != "meta" and torch.equal(a, b))
    return type(a) is type(b) and a == b


def _forge(seen, constants) -> None:
    """Write each constant leaf into `seen` where its path exists (lists and dicts; a tuple stays as it is)."""
    for path, value in constants:
        parent = seen
        for key in path[:-1]:
            ok = (isinstance(parent, dict) and key in parent) or (
                isinstance(parent, list) and isinstance(key, int) and key < len(parent))
            if not ok:
                break
            parent = parent[key]
        else:
            if (isinstance(parent, dict) and path[-1] in parent) or (
                    isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent)):
                parent[path[-1]] = value


def _verdict(drill, seen, case: Case) -> str:
    try:
        refuse_nonfinite(seen, drill.nonfinite)
        drill.judge(seen, case=case)
    except CheckFailed as failure:
        return failure.code
    except Exception as error:  # a judge that cannot read a forged leaf: it fails, which is all this asks
        return f"judge-error ({type(error).__name__})"
    return "passed"


SWEPT = [d for d in all_drills() if d.kind != "explain" and not d.self_check and any(
    code not in SELF_CHECKED_CODES for _, code in d.wrong_answers)]


@pytest.mark.parametrize("drill", SWEPT, ids=lambda d: d.id)
def test_constant_leaves_forged_into_a_wrong_answer_do_not_pass_it(drill):
    first, second = Case(seed=3), Case(seed=4)
    reference, other = _observed(drill, drill.solution, first), _observed(drill, drill.solution, second)
    assert reference is not None and other is not None, "the reference solution raised"
    on_other = dict(_leaves(other))
    constants = [(path, value) for path, value in _leaves(reference) if path in on_other and _same(
        value, on_other[path])]
    forged = []
    for source, code in drill.wrong_answers:
        if code in SELF_CHECKED_CODES:
            continue
        seen = _observed(drill, source, first)
        if seen is not None:
            _forge(seen, constants)
            if _verdict(drill, seen, first) == "passed":
                forged.append(code)
    assert not forged, f"a prelude that writes the reference's constant leaves passes the wrong answers {forged}"
