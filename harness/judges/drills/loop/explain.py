"""The training-loop explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "loop-forget-zero-grad",
        options=(
            ("3.0: the second backward overwrites .grad", "backward() never overwrites: it adds into .grad, "
             "which is why training loops call zero_grad once per batch"),
            ("0.0: the second gradient cancels the first", "both calls produce +3; nothing subtracts"),
            ("6.0: each backward adds into .grad", "backward() accumulates: 3 + 3 = 6. Without zero_grad, an "
             "optimizer step would use the sum of every earlier batch's gradient"),
            ("an error: the graph was freed by the first call", "each call builds a new loss and a new graph, so "
             "nothing is reused; the error comes only when one graph is backwarded twice"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "loop-optimizer-before-to",
        options=(
            ("AdamW allocates its moment buffers when it is constructed, on the CPU, and they stay there",
             "optimizer state is created lazily at the first step(), on each parameter's device: the order of "
             "construction does not place it"),
            ("it holds the tensors it was given: a move making new ones leaves it stepping stale copies",
             "module.to() usually swaps each Parameter's data in place, so the same objects survive; but "
             "a conversion that creates new Parameters leaves the optimizer updating orphans, silently. Moving "
             "first rules it out"),
            ("optimizer.step() raises a device-mismatch error at the first step",
             "usually it works (to() keeps the same Parameter objects); when it breaks, it breaks silently: the "
             "model simply stops changing"),
            ("moving the model afterwards silently resets the learning rate and momentum to their defaults",
             "the learning rate lives in optimizer.param_groups; moving the model never touches it"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "loop-overfitting-remedy",
        options=(
            ("raise the learning rate, so that the model escapes the sharp minimum it sits in",
             "a larger step makes training noisier; it does not stop the model fitting the noise of its training "
             "set, which is what the widening gap shows"),
            ("train for more epochs: validation loss catches up with training loss later",
             "the gap has widened for 22 epochs: more epochs fit the training noise further"),
            ("regularise (weight decay, dropout, augmentation); keep the best-val weights",
             "the model is overfitting: regularisation limits how well it can fit noise, and early stopping "
             "keeps the epoch-8 weights instead of the last ones"),
            ("make the network wider and deeper, so it has the capacity to fit the validation set too",
             "more capacity fits the training set's noise even better: the gap grows"),
        ),
        key="c",
    )
)
