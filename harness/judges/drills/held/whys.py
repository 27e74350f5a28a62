"""Why each held drill's reference solution is right (`harness.judges.drills.whys`, for the drills whose answer
passes a graded exercise): a why says what the answer does, so it stays with the answers, out of a graded student
tree (`harness.grading.held_drills`).
"""

from __future__ import annotations

from harness.drills import core
from harness.judges.drills import whys


def add_answers(*answers: core.Answers) -> None:
    """`harness.judges.drills.whys.add_answers` with the held drills' whys."""
    whys.add_answers(*answers, whys=WHYS)


# Why each held write and bughunt drill's reference solution is right, by drill id
WHYS: dict[str, str] = {
    "loop-train-step": (
        "train mode makes dropout and BatchNorm behave as in training; zeroing first stops gradients adding up across"
        " steps; backward then step uses this batch's gradient once."),
    "modules-plain-list": (
        "nn.Module registers the submodules it finds as attributes: a plain Python list hides them, so parameters(), "
        "the optimizer and .to(device) never see those layers. nn.ModuleList registers each one."),
    "schedulers-warmup-cosine": (
        "the factor rises linearly during warm-up and then follows half a cosine from 1 to 0; guarding the division "
        "and clamping progress keeps it defined when warmup equals total and after the end."),
    "amp-train-step": (
        "the loss is scaled so small fp16 gradients do not underflow; they must be unscaled before clipping so the "
        "threshold applies to the true gradient, and scaler.step skips steps whose gradients overflowed."),
    "performance-epoch-metrics": (
        ".item() waits for the device to finish; keeping running sums as tensors on the device and converting once at"
        " the end syncs once per epoch instead of once per batch."),
    "checkpointing-exact-resume": (
        "an exact resume needs everything that shapes the next steps: weights, optimizer moments, the scheduler's "
        "position, the epoch and the random state."),
    "tensors-logsumexp": (
        "exp overflows for large inputs; subtracting the maximum first makes every exponent <= 0 and adding it back "
        "after the log gives the same value exactly. A row of -inf needs m replaced by 0, or -inf - -inf is nan."),
    "autograd-custom-function": (
        "backward must return the incoming gradient times the derivative of forward, d/dx x*sigmoid(x) = s * (1 + x *"
        " (1 - s)) with s = sigmoid(x); saving x in ctx is enough to rebuild it, and gradcheck compares it with "
        "finite differences."),
    "data-pad-collate": (
        "a batch tensor needs one length, so shorter sequences are padded to the longest; the true lengths travel "
        "with the batch so later code can ignore the padding."),
    "data-worker-seeding": (
        "each worker receives a copy of the dataset, NumPy Generator included, so all draw the same numbers; "
        "torch.initial_seed() in a worker differs per worker and per epoch and follows the loader's seed."),
    "checkpointing-atomic-save": (
        "a crash while writing tears a file; writing to a temporary file in the same directory and os.replace-ing it "
        "over the target swaps in a complete file in one step, so readers see the old or the new, never half."),
    "checkpointing-portable-state-dict": (
        "DDP adds 'module.' and torch.compile '_orig_mod.' in front of every key; stripping them (repeatedly, as both"
        " can stack) gives keys that load into the plain model."),
    "clipping-under-amp": (
        "the scaler multiplies the loss, and so every gradient, by the scale: clipping before unscale_ compares "
        "scaled gradients with the threshold. Unscaling first clips the true gradient."),
    "memory-checkpoint-reentrant": (
        "the reentrant checkpoint passes gradients only through inputs that require grad; use_reentrant=False tracks "
        "the parameters inside the block whatever the inputs."),
    "checkpointing-resume-diverges": (
        "the optimizer carries state (momentum, Adam's moments, the step count); without it the resumed run restarts "
        "that state from zero and follows another path."),
    "checkpointing-full-training-state": (
        "the scheduler, the GradScaler and the data generator all have state that moves with training; each must be "
        "saved and restored, or the resumed run uses other LRs, scales or data orders."),
}
