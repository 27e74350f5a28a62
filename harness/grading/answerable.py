"""What the answerability audit may find (`harness.grading.answerability`): each hit declared, with its reason.

`ALLOWED`: (task, shipped object) -> why the course ships it although it passes that exercise's check (later
lessons' given cells import it from the library; a config the lesson shows, where the points rest on the pipeline).
`KNOWN_ANSWERABLE`: (task, shipped object) -> the work that will close it, or why one stays.
`tests/test_answerability.py` keeps both tables equal to what the audit finds on a graded tree: a new hit fails,
and so does an entry the audit no longer finds.
`WITHHELD_DRILLS`: the held drills, each with the exercises its answer passes (lesson 11's graded drills, and drills
whose answer passes another lesson's exercise): a graded student tree carries neither their solutions nor their planted
wrong answers (`harness.grading.held_drills`); a practice tree (`--practice`) carries them.
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
    ("10-held-out", "text notebooks/10_capstone/10_capstone.ipynb cell 31 (renamed small)"):
        "the exercise grades how a run of the student's own train_capstone (10-train) does on shapes it never saw; "
        "its answer is only the config, and the lesson's resume demo shows one (`small`) that clears the bar with a "
        "correct pipeline: the points rest on the pipeline, which no config hands over",
    ("15-pad-collate", "harness.sequences.pad_batch"):
        "lesson 15's own given cells import pad_batch from harness.sequences and pad the training set with it, so the "
        "tree ships it; open: the exercise should ask for what pad_batch does not hand over (issue 38 item 1)",
}

_REFERENCE = "issue 38 item 1: a judge's reference the tree ships for local checks; moves to the instructor's side"
_KEY = ("an explain drill's key: withheld from answers.json and `harness drill solution`, but lesson 11's local check "
        "of 11-why-eval needs it (its choices, harness/judges/drills/modules.py), and a local check of four options "
        "gives the key in at most three tries anyway")
KNOWN_ANSWERABLE: dict[tuple[str, str], str] = {
    ("11-why-eval", "drill answer modules-why-eval"): _KEY,
}

# The held drills, each with the graded exercises its answer passes: lesson 11's graded drills, then the drills whose
# answer passes another lesson's exercise (found by the audit), and one whose answer is another held drill's.
WITHHELD_DRILLS: dict[str, tuple[str, ...]] = {
    **{drill: (task,) for task, drill in NOTEBOOK_DRILLS},
    "schedulers-warmup-cosine": ("07-warmup-cosine", "11-warmup-cosine"),
    "tensors-logsumexp": ("01-logsumexp",),
    "autograd-custom-function": ("01-silu-function",),
    "data-pad-collate": ("03-pad-collate",),
    "data-worker-seeding": ("03-worker-init",),
    "checkpointing-atomic-save": ("08-atomic-save",),
    "checkpointing-portable-state-dict": ("08-portable",),
    "clipping-under-amp": ("11-amp-step",),
    "memory-checkpoint-reentrant": ("13-checkpoint",),
    "checkpointing-resume-diverges": ("11-exact-resume",),  # its solution is checkpointing-exact-resume's
    # its solution is 11-exact-resume's answer with a scaler and a generator added: dropping them is mechanical
    "checkpointing-full-training-state": ("11-exact-resume",),
}
