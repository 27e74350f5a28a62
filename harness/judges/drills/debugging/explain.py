"""The debugging explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "debugging-init-loss",
        options=(
            ("normal: every loss always starts out high", "an untrained model should be unsure: about ln(10) = 2.3 "
             "over 10 classes, not ten times that"),
            ("logits far too large: confidently wrong", "a near-uniform softmax costs ln(10) = 2.3; 23 means large "
             "logits at init (a badly scaled last layer, unnormalised inputs)"),
            ("the learning rate is set too low for this model",
             "no step has been taken at step 0: the learning rate cannot change the first loss"),
            ("the dataset is too small for the model to learn",
             "the size of the data does not change the loss of an untrained model on one batch"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "debugging-overfit-one-batch",
        options=(
            ("a bug in the model, loss or loop", "any reasonable model can memorise 16 examples: a loss stuck far "
             "above 0 means something bounds the logits, cuts the gradient or misfeeds the loss"),
            ("the batch is too small to learn from", "a small batch is the easiest thing to memorise: that is why the "
             "test uses one"),
            ("the run needs the whole dataset first", "more data makes fitting harder, not easier; the test isolates "
             "the model and the loop from the data"),
            ("nothing yet: 200 steps is far too few", "on one batch of 16 a healthy model reaches about 0 in far fewer "
             "steps, as the experiment shows"),
        ),
        key="a",
    )
)
