"""Why each drill's reference solution is right: the comment block that opens every write and bughunt drill's
solution, and follows an explain drill's answer line, so that `harness drill solution` explains as well as shows
(issue 41, item 5).

The judge modules register their answers through this module's `add_answers`, which joins each solution to its
why: `WHYS` for write and bughunt drills (a drill without one is refused), the key's own reason for an explain
drill.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import replace

from harness.drills import core

PREFIX = "# Why: "
_MORE = "#   "
_COLUMNS = 79


def why_comment(why: str) -> str:
    """`why` as comment lines of at most 79 columns, the first opening with `# Why: `."""
    lines = textwrap.wrap(" ".join(why.split()), width=_COLUMNS, initial_indent=PREFIX, subsequent_indent=_MORE)
    return "".join(f"{line}\n" for line in lines)


def why_of(solution: str) -> str:
    """The why a solution's comment block gives, as one line ("" when it has none)."""
    lines = iter(solution.splitlines())
    for line in lines:
        if line.startswith(PREFIX):
            words = [line[len(PREFIX):]]
            for more in lines:
                if not more.startswith(_MORE):
                    break
                words.append(more[len(_MORE):])
            return " ".join(" ".join(words).split())
    return ""


def add_answers(*answers: core.Answers, whys: Mapping[str, str] | None = None) -> None:
    """`harness.drills.core.add_answers`, each solution joined to its why: before the code of a write or bughunt
    drill (from `whys`, by default `WHYS`; a held drill's are `harness.judges.drills.held.whys.WHYS`), after an explain
    drill's answer line (its key's reason)."""
    whys = WHYS if whys is None else whys
    joined = []
    for answer in answers:
        if answer.choices is not None:
            reason = answer.choices.options[answer.choices.key].why.removeprefix("right: ")
            solution = answer.solution + why_comment(reason)
        elif answer.drill_id in whys:
            solution = why_comment(whys[answer.drill_id]) + answer.solution
        else:
            raise ValueError(f"drill {answer.drill_id}: its solution needs a why (harness.judges.drills.whys.WHYS)")
        joined.append(replace(answer, solution=solution))
    core.add_answers(*joined)


# Why each write and bughunt drill's reference solution is right, by drill id
WHYS: dict[str, str] = {
    "tensors-gather-log-probs": (
        "log_softmax normalises each row in one stable step (no log of a rounded-to-0 probability), and gather picks "
        "the target's column in every row at once; squeeze drops the index dimension gather keeps."),
    "tensors-pairwise-distances": (
        "inserting a dimension on each side makes a (N, 1, D) minus (1, M, D) broadcast to every (i, j) pair without "
        "a Python loop; summing the squares over the last dimension gives each pair's squared distance."),
    "tensors-sgd-in-place": (
        "the update must not be recorded by autograd (no_grad) and must change the caller's leaf tensors themselves "
        "(in-place -=); clearing .grad stops the next backward adding into this step's gradient."),
    "tensors-uint8-wraparound": (
        "uint8 holds 0..255 and wraps modulo 256, so 0 - 128 becomes 128 before any float appears; converting to "
        "float32 first makes the subtraction signed, and the caller's tensor is left untouched."),
    "tensors-attention-scores": (
        "each query is compared with every key by a dot product over the last dimension, which q @ k^T does for all "
        "heads and batches at once; dividing by sqrt(d) keeps the scores' variance near 1 so the softmax does not "
        "saturate."),
    "tensors-masked-mean": (
        "the padded positions must add nothing to the sum, and the mean must divide by the real length, not the "
        "padded one; the mask from arange < lengths marks exactly the real positions."),
    "tensors-split-merge-heads": (
        "a view keeps memory order: (B, T, H*D) splits cleanly into (B, T, H, D), and only after that may the T and H"
        " dimensions swap; merging undoes the same steps in reverse, so each head sees whole tokens."),
    "autograd-detach-target": (
        "detach cuts the target out of the graph, so the loss's gradient flows into the online network only; the "
        "target still takes part in the value of the loss."),
    "autograd-inplace-trap": (
        "sigmoid saves its output for backward; an in-place change to that output bumps its version and autograd "
        "refuses to use it. An out-of-place multiply makes a new tensor and leaves the saved one intact."),
    "autograd-input-gradients": (
        "autograd.grad returns the gradient without writing into any .grad, and summing the picked logits gives one "
        "scalar whose gradient per input row is that row's own gradient (the rows do not interact)."),
    "modules-freeze-backbone": (
        "requires_grad = False makes autograd skip the backbone's weights, and handing only the trainable parameters "
        "to the optimizer keeps its state (and any weight decay) off the frozen ones."),
    "modules-buffer": (
        "a buffer is state that is saved in the state_dict and moved by .to(device) but is not a parameter the "
        "optimizer updates; updating it only in training mode keeps evaluation from changing it."),
    "modules-layer-norm-from-scratch": (
        "LayerNorm normalises each sample over its last len(normalized_shape) dimensions with the biased variance "
        "(divided by n), and eps sits inside the square root; built from torch operations, autograd differentiates "
        "it."),
    "modules-param-groups": (
        "weight decay pulls weights towards zero, which regularises matrices but only shifts biases and norm scales; "
        "two groups let the optimizer decay the first and not the second."),
    "loop-eval-changes": (
        "eval mode turns dropout off and makes BatchNorm use its running statistics, so two evaluations agree; "
        "inference_mode stops autograd from recording graphs nobody will backpropagate."),
    "loop-loss-broadcasting": (
        "a (B,) prediction against a (B, 1) target broadcasts to (B, B) and the loss averages every pair; giving both"
        " the same shape compares each prediction with its own target."),
    "loop-loss-stalls": (
        "backward writes the gradient and step reads it; zeroing between them hands step an empty gradient, so the "
        "model never moves. Zeroing before the forward clears the previous batch's gradient only."),
    "loop-adamw-from-scratch": (
        "AdamW decays the weights directly (scaled by lr, before the Adam step) instead of adding decay to the "
        "gradient; the moments are bias-corrected because they start at zero, and eps is added to sqrt(v_hat) as "
        "torch does."),
    "loop-eval-restores-mode": (
        "evaluate must hand the model back as it found it: remembering model.training and restoring it keeps dropout "
        "on for the training that follows, and off for a caller who was already evaluating."),
    "loop-early-stopping": (
        "the best weights must be copied (deepcopy), or the saved state_dict keeps changing with the live model; "
        "counting epochs without improvement and stopping at patience, then restoring the copy, returns the best "
        "model."),
    "loop-three-bugs": (
        "each step needs only its own gradient (zero_grad before the forward), the running loss must not hold every "
        "step's graph (detach), and model.train() must come back at every epoch because validation switched to eval."),
    "data-balanced-sampler": (
        "weighting each sample by 1 / its class count gives every class the same total weight, and drawing with "
        "replacement lets the rare samples repeat so each epoch is balanced."),
    "data-train-loader": (
        "shuffling with a seeded generator gives a new but reproducible order each epoch; workers prepare batches in "
        "parallel and persist across epochs; pinned memory speeds the copy to a GPU."),
    "amp-loss-in-fp32": (
        "under autocast log_softmax and the sums run in the input's dtype, and bf16 keeps about 3 significant digits;"
        " computing the loss from float32 logits keeps its precision while the matmuls stay fast."),
    "amp-skipped-steps": (
        "after an overflow the scaler skips the step and update() cuts the scale by backoff_factor; comparing the "
        "scale before and after update() tells whether the step was skipped."),
    "amp-loop-three-bugs": (
        "backward belongs outside autocast, unscale_ must precede clipping so the threshold sees true gradients, and "
        "OneCycleLR counts batches, so it steps once per optimizer step."),
    "clipping-total-norm": (
        "clip_grad_norm_ returns the total norm measured before clipping: logging that value shows how large the "
        "gradients really were, in the same call that clips them."),
    "clipping-per-group": (
        "each group's parameters are measured and clipped together against that group's own threshold, so one group's"
        " large gradients do not shrink another's."),
    "clipping-with-accumulation": (
        "the micro-batches' gradients add up in .grad; dividing each loss by their number makes the sum the full "
        "batch's mean gradient, and clipping once after all of them clips that mean."),
    "schedulers-onecycle-per-batch": (
        "OneCycleLR is built for total_steps optimizer steps; stepped once per epoch it never leaves its warm-up, so "
        "it must step after every optimizer step."),
    "schedulers-plateau-mode": (
        "for accuracy higher is better, so mode='max' makes the scheduler treat a rise as improvement; otherwise it "
        "would cut the LR while the model improves."),
    "schedulers-wrong-granularity": (
        "StepLR's step_size counts scheduler steps, meant as epochs; stepping it per batch decays the LR len(batches)"
        " times too fast. One step after each epoch's batch loop keeps the schedule."),
    "schedulers-linear-warmup": (
        "LambdaLR multiplies each group's initial LR by the factor; a factor rising linearly to 1 over warmup steps "
        "and then staying at 1 gives the warm-up and the constant LR."),
    "schedulers-param-group-lrs": (
        "LambdaLR scales each group's own initial LR by the same factor, so the groups keep their ratio; the groups "
        "must exist before the scheduler records their initial LRs."),
    "schedulers-plateau-metric": (
        "ReduceLROnPlateau cuts the LR when the number it is given stops improving; given the validation loss once "
        "per epoch, it reacts to overfitting, which the training loss never shows."),
    "checkpointing-rank0-save": (
        "every rank holds the same weights, so one writer (rank 0) suffices and avoids ranks overwriting the file; "
        "saving ddp_model.module's state_dict keeps the keys free of 'module.'."),
    "checkpointing-safe-legacy-load": (
        "weights_only=True refuses every global not on its allowlist; allowing exactly the one type the old file "
        "needs keeps the safety for everything else."),
    "checkpointing-resume-schedule": (
        "state_dict() returns references to live tensors, so an in-memory snapshot must be deep-copied; restoring "
        "model, optimizer and scheduler and stepping nothing on load continues exactly where training stopped."),
    "ddp-set-epoch": (
        "DistributedSampler shuffles with seed + epoch; set_epoch at the start of each epoch gives a new order every "
        "epoch that every rank agrees on."),
    "ddp-barrier-checkpoint": (
        "torch.load on the other ranks could run before rank 0 has finished writing; a barrier between the save and "
        "the loads makes every rank wait for the complete file."),
    "ddp-disjoint-shards": (
        "one permutation shared by all ranks (same seed and epoch), padded to a multiple of the world size and dealt "
        "with a stride, gives each rank an equal share with no sample on two ranks."),
    "ddp-eval-loss-sums": (
        "a mean of means weighs a small batch or a small rank like a large one; summing the losses and counting the "
        "samples, all-reducing both and dividing once gives the mean over every sample."),
    "ddp-gather-full-params": (
        "all_gather fills one tensor per rank in rank order; concatenating them restores the flat vector, and cutting"
        " it at running offsets (dropping the padding) restores each parameter's shape."),
    "ddp-global-accuracy": (
        "a mean of per-rank accuracies weighs ranks with fewer samples like the others; all-reducing the correct and "
        "total counts and dividing once gives the accuracy over every sample."),
    "ddp-shard-flat": (
        "FSDP and ZeRO cut one flat vector of all parameters, zero-padded to a multiple of the world size, into equal"
        " contiguous pieces, so every rank's shard has the same size."),
    "ddp-accumulation-loop": (
        "DDP all-reduces on every backward; under no_sync the micro-batches only accumulate locally and the last one,"
        " outside it, all-reduces the sum once. Dividing by accum_steps makes that sum a mean."),
    "ddp-zero1-step": (
        "every rank needs the averaged gradient but updates only its own shard of the state; all-gathering the "
        "updated shards then puts the same full parameters back on every rank."),
    "repro-seeded-split": (
        "a private torch.Generator seeded once gives the same permutation every run without touching the global RNG, "
        "so the split stays fixed whatever else draws random numbers."),
    "repro-two-runs-differ": (
        "with shuffle=True the loader draws its order from a generator; a generator of its own, seeded once, gives "
        "the same sequence of orders in every run."),
    "repro-rng-capture": (
        "Python's random, NumPy, torch's global RNG and each torch.Generator are separate streams; restoring all of "
        "them replays every random draw."),
    "repro-split-moves-with-model": (
        "random_split without a generator draws from the global RNG, whose position depends on how many numbers the "
        "model's initialisation consumed; a seeded generator of its own fixes the split."),
    "repro-worker-seeds": (
        "each worker's seed (info.seed) is derived from the loader's base seed and the worker id, and a seeded loader"
        " generator fixes the base seed each epoch: workers differ, runs repeat."),
    "performance-loader-settings": (
        "workers prepare batches in parallel with training, persistent ones skip the restart each epoch, and pinned "
        "memory makes the copy to a CUDA device faster and asynchronous."),
    "performance-log-every": (
        "each .item() makes the host wait for the device; summing detached losses on the device and converting once "
        "per window syncs once per window."),
    "debugging-cannot-overfit": (
        "cross_entropy applies log_softmax itself; a Softmax before it squashes the logits into [0, 1], so the loss "
        "cannot drop far and the gradients shrink. Raw logits let the model fit one batch."),
    "debugging-exploding-late": (
        "backward adds into .grad; without zeroing, each step uses the sum of every earlier gradient, and the steps "
        "grow until the loss explodes."),
    "debugging-dead-relus": (
        "a ReLU unit is dead when its output is 0 for every input of the batch; all() over the batch dimension marks "
        "those units and their mean is the share."),
    "debugging-detect-anomaly": (
        "anomaly detection checks each backward function's output and raises naming the one that produced a nan; the "
        "context manager switches the costly mode off again afterwards."),
    "debugging-first-nonfinite": (
        "forward hooks run in execution order, so the first hook to see a non-finite output names the first layer "
        "that produced one; removing the handles in finally leaves the model clean even after an error."),
    "debugging-grad-norms": (
        "each .item() waits for the device; stacking the norms into one tensor and converting once needs one sync for"
        " all the layers."),
    "debugging-hooks-cleanup": (
        "a finally block runs on the way out of an exception as well, so the handles are removed whatever happens; an"
        " except clause would swallow the error the caller needs to see."),
    "debugging-init-output-bias": (
        "a softmax of the log-frequencies predicts the label distribution, so while the weights' contribution is "
        "small at init the first loss is the labels' entropy, not the loss of a confident guess."),
    "debugging-train-script": (
        "a constant feature has std 0 and 0 / 0 is nan, so the std is clamped; inputs and labels must be shuffled "
        "with one permutation to stay paired; gradients are zeroed once per batch."),
    "memory-adam-state-bytes": (
        "AdamW keeps two tensors (exp_avg and exp_avg_sq) the size of each trainable parameter, in its dtype: 2 * "
        "numel * element_size per parameter."),
    "memory-activation-bytes": (
        "saved tensors can be views of one storage or the same tensor saved twice; counting each storage once by its "
        "data pointer measures the memory really kept."),
    "memory-uneven-accumulation": (
        "the full batch's mean is the micro-batches' means weighted by their share of the rows; with a smaller last "
        "micro-batch equal weights would over-count it."),
    "memory-accumulation-script": (
        "gradients must add up over a group and be cleared only after the step; dividing each loss by accum_steps "
        "makes the sum a mean; the running total must be detached so no graph is kept."),
    "finetuning-gradual-unfreeze": (
        "unfreezing from the head down lets the new head settle before the pretrained blocks move; block i becomes "
        "trainable once epoch reaches len(blocks) - i."),
    "finetuning-freeze-backbone": (
        "a linear probe trains only the head: the backbone's weights get no gradient and are not in the optimizer, "
        "and eval mode keeps its BatchNorm statistics from drifting."),
    "finetuning-load-new-head": (
        "the new head has other shapes, so its keys are dropped and strict=False skips them; checking missing and "
        "unexpected keys proves that everything else loaded."),
    "finetuning-lora-linear": (
        "LoRA freezes the base and learns a low-rank update B @ A; B starts at zero so training starts from the "
        "pretrained output, and merging adds scale * B @ A into the weight for free inference."),
    "finetuning-param-groups": (
        "the backbone needs a smaller LR than the new head, and only weight matrices should decay; four groups give "
        "each combination its own settings."),
    "finetuning-script-three-bugs": (
        "model.train() switches every submodule back, so the backbone's eval() must come after it; cross_entropy "
        "wants logits; gradients are zeroed at every step."),
    "sequences-pad-collate": (
        "the lengths must be measured before padding (afterwards every sequence has the same length), and the padding"
        " value marks positions later code will ignore."),
    "sequences-sinusoidal-pe": (
        "each pair of dimensions is a sine and a cosine of the position at its own frequency, geometric from 1 to "
        "1/10000, so nearby positions get similar codes and the model can read relative offsets."),
    "sequences-attention-by-hand": (
        "scaling by 1/sqrt(d) keeps the softmax from saturating; masked scores set to -inf get exactly zero weight; "
        "the softmax runs over the keys so each query's weights sum to 1."),
    "sequences-causal-padding-mask": (
        "a query may attend a key when the key is not in its future (j <= i) and is a real token; the two masks "
        "broadcast over batch, heads and queries and are combined with AND."),
    "sequences-label-smoothing": (
        "label smoothing mixes the target's negative log-probability with the mean over all classes; ignored rows "
        "must not count in the average, and clamping their targets keeps gather in range."),
    "sequences-lstm-last-step": (
        "with padding, the last output position is padding for shorter sequences; packing runs each sequence only to "
        "its length, so h_n holds each one's last real step."),
    "sequences-masked-loss": (
        "padded positions must neither add to the loss nor count in the mean; ignore_index does both, so the mean "
        "runs over the real tokens only."),
    "sequences-numpy-loss": (
        "a loss computed in NumPy or from .item() builds a new leaf, so autograd never sees how it depends on pred; "
        "torch ops on pred keep the graph, and the softplus identity avoids cosh overflowing."),
    "sequences-classifier-three-bugs": (
        "position lengths[b] is the first pad (so <, not <=), the masked sum must be divided by the real lengths, and"
        " gradients must be zeroed before each backward."),
    "export-predict-inference-mode": (
        "eval mode makes dropout and BatchNorm deterministic, and inference_mode skips autograd's bookkeeping "
        "entirely, which is faster and uses less memory."),
    "export-state-dict-config": (
        "a state_dict with a plain config dict holds only tensors and plain types, so it loads with "
        "weights_only=True; the config rebuilds the architecture the weights fit."),
    "export-fold-batchnorm": (
        "in eval mode BatchNorm is an affine map per channel, (z - mean) * s + beta with s = gamma / sqrt(var + eps);"
        " applied to z = W x + b it gives W' = W * s and b' = (b - mean) * s + beta."),
    "export-latency-median": (
        "the first calls pay for warm-up (allocation, compilation, caches); timing each call separately and taking "
        "the median ignores those and the outliers."),
    "export-parity-check": (
        "an export can change shapes or values slightly; checking shapes first, then |got - want| <= atol + rtol * "
        "|want| element by element, tells a real mismatch from rounding."),
    "export-torch-export-dynamic-batch": (
        "torch.export specialises every dimension unless told otherwise; declaring the batch dimension a Dim lets the"
        " program accept any batch size, and eval mode fixes dropout and BatchNorm."),
    "export-serving-three-bugs": (
        "weights_only=True refuses code in the file; DDP saved keys with 'module.', which must be stripped so a "
        "strict load really loads; eval mode makes every request's answer deterministic."),
}
