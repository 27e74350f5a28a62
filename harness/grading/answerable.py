"""What the answerability audit may find (`harness.grading.answerability`): each hit declared, with its reason.

`ALLOWED`: (task, shipped object) -> why the course ships it although it passes that exercise's check (later
lessons' given cells import it from the library). `KNOWN_ANSWERABLE`: (task, shipped object) -> the work that will
close it: hits that cannot be withheld yet (a judge's or probe's reference, which local checks need until issue 38
item 1 moves references to the instructor; a drill's answer, whose text its judge module still carries).
`tests/test_answerability.py` keeps both tables equal to what the audit finds on a graded tree: a new hit fails,
and so does an entry the audit no longer finds.
`WITHHELD_DRILLS`: drills whose answers a graded student tree does not carry in `answers.json` nor reveal (lesson
11's graded drills, and drills whose answer passes another lesson's exercise); a practice tree (`--practice`)
carries them.
"""

from __future__ import annotations

from harness.drills.lesson import NOTEBOOK_DRILLS

# A library function a later lesson's given cells import ships with every lesson: until the tree can hand the
# library out lesson by lesson (after each due date), it is declared here, and the exercise's points stay at risk.
_LIBRARY = ("lesson {later}'s given cells import {name} from the course library, so the tree ships it from the "
            "first lesson; shipping the library lesson by lesson (issue 38 item 1) would close it")
ALLOWED: dict[tuple[str, str], str] = {
    ("00-count-params", "harness.finetune.count_parameters"): _LIBRARY.format(later=14, name="count_parameters"),
    ("02-count-trainable", "harness.finetune.count_parameters"): _LIBRARY.format(later=14, name="count_parameters"),
    ("03-worker-init", "harness.repro.seed_worker"):
        "the library's loaders (harness.data.loaders) pass it as worker_init_fn, so the tree ships it; lesson 03's "
        "own text names it as the library's version of the exercise",
    ("15-pad-collate", "harness.sequences.pad_batch"):
        "lesson 15's own given cells import pad_batch from harness.sequences and pad the training set with it, so the "
        "tree ships it; open: the exercise should ask for what pad_batch does not hand over (issue 38 item 1)",
}

_REFERENCE = "issue 38 item 1: a judge's reference the tree ships for local checks; moves to the instructor's side"
_DRILL = ("issue 38 item 1: the drill's answer, withheld from answers.json, is still the `solution` of its Answers "
          "in harness/judges/drills (the judge side the tree ships)")
KNOWN_ANSWERABLE: dict[tuple[str, str], str] = {
    ("01-to-tokens", "harness.judges.lesson01.to_tokens._reference_tokens"): _REFERENCE,
    ("01-logsumexp", "drill answer tensors-logsumexp"): _DRILL,
    ("01-silu-function", "drill answer autograd-custom-function"): _DRILL,
    ("03-pad-collate", "drill answer data-pad-collate"): _DRILL,
    ("03-worker-init", "drill answer data-worker-seeding"): _DRILL,
    ("05-amp-step", "harness.judges.lesson05.amp_step.reference_amp_step"): _REFERENCE,
    ("05-cast-report", "harness.judges.lesson05.cast_report.reference_cast_report"): _REFERENCE,
    ("05-choose-precision", "harness.judges.lesson05.choose_precision.reference_choose_precision"): _REFERENCE,
    ("05-output-dtypes", "harness.judges.lesson05.output_dtypes.reference_output_dtypes"): _REFERENCE,
    ("05-scale-trace", "harness.judges.lesson05.scale_trace.real_scale_trace"): _REFERENCE,
    ("07-warmup-cosine", "harness.judges.drills.schedulers.warmup_cosine_factor"): _REFERENCE,
    ("07-warmup-cosine", "harness.judges.lesson07.common.warmup_cosine_reference"): _REFERENCE,
    ("07-warmup-cosine", "drill answer schedulers-warmup-cosine"): _DRILL,
    ("08-atomic-save", "drill answer checkpointing-atomic-save"): _DRILL,
    ("08-portable", "drill answer checkpointing-portable-state-dict"): _DRILL,
    ("09-ddp-mean", "harness.distributed.all_reduce_mean"):
        "issue 38 item 1: a library function no lesson's given cells and no library module call; "
        "harness/distributed.py "
        "is not this audit's to change: drop it from the library or ship it after lesson 09's due date",
    ("10-precision", "harness.checks.lesson10.common.reference_precision"):
        "issue 38 item 1: a probe-side reference (harness/checks, mounted in the graded kernel too); moves to the "
        "instructor's side",
    ("11-amp-step", "drill answer amp-train-step"): _DRILL,
    ("11-amp-step", "drill answer clipping-under-amp"): _DRILL,
    ("11-epoch-metrics", "drill answer performance-epoch-metrics"): _DRILL,
    ("11-plain-list", "drill answer modules-plain-list"): _DRILL,
    ("11-train-step", "drill answer loop-train-step"): _DRILL,
    ("11-warmup-cosine", "harness.judges.drills.schedulers.warmup_cosine_factor"): _REFERENCE,
    ("11-warmup-cosine", "harness.judges.lesson07.common.warmup_cosine_reference"): _REFERENCE,
    ("11-warmup-cosine", "drill answer schedulers-warmup-cosine"): _DRILL,
    ("11-why-eval", "drill answer modules-why-eval"): _DRILL,
    ("13-activation-formula", "harness.judges.lesson13.activation_formula.measured_activation_bytes"): _REFERENCE,
    ("13-checkpoint", "drill answer memory-checkpoint-reentrant"): _DRILL,
    ("13-memory-formula", "harness.judges.lesson13.memory_formula.reference_training_memory"): _REFERENCE,
    ("15-masked-loss", "harness.judges.lesson15.masked_loss._reference_masked"): _REFERENCE,
    ("15-pad-collate", "harness.judges.lesson15.pad_collate._reference_collate"): _REFERENCE,
    ("15-warmup", "harness.judges.lesson15.warmup.reference_lr_factor"): _REFERENCE,
}

# Exercises the audit cannot try: their solution, run from the notebook's imports and solution cells alone, does not
# pass its own check (it needs the given cells' objects), so no candidate is tried. Each is a gap of the audit.
# 10-train joined when its check came to read the validation loader's order and the globals its functions load.
NOT_AUDITED: tuple[str, ...] = ("07-plateau", "08-resume", "10-held-out", "10-train")

# Lesson 11's graded drills; then the drills whose answers pass another lesson's exercise (the audit's hits).
WITHHELD_DRILLS: tuple[str, ...] = (*(drill for _, drill in NOTEBOOK_DRILLS), "tensors-logsumexp",
                                    "autograd-custom-function", "data-pad-collate", "data-worker-seeding",
                                    "checkpointing-atomic-save", "checkpointing-portable-state-dict",
                                    "clipping-under-amp", "memory-checkpoint-reentrant")
