"""The fine-tuning explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "finetuning-linear-probe-or-finetune",
        options=(
            ("Fit a linear head on frozen features first, then fine-tune gently",
             "few labels cannot re-fit millions of weights, and features that already separate the classes need "
             "only a head; fine-tuning after that (LP-FT) starts from a trained head instead of a random one"),
            ("Fine-tune every layer at the pretraining LR from the very first step",
             "the random head sends large, noisy gradients into the backbone and 300 images are overfitted in a "
             "few epochs: the pretrained features are damaged before the head is any good"),
            ("Re-initialise every layer and train the whole network from scratch",
             "from scratch a ResNet needs far more than 300 images; it throws away exactly what transfers"),
            ("Unfreeze everything but keep BatchNorm in train mode to adapt stats",
             "small fine-tuning batches give noisy batch statistics that overwrite the pretrained running ones; "
             "it does not address the few-labels problem either"),
        ),
        key="a",
    )
)


add_answers(
    choice_answers(
        "finetuning-forgetting-lower-lr",
        options=(
            ("BatchNorm statistics drift: put the backbone in eval, keep the LR",
             "BatchNorm drift can hurt, but it does not explain features being overwritten by large steps; the "
             "weights themselves move far from the pretrained ones"),
            ("Large steps overwrite the features: cut the LR 10-100x, warm up",
             "at the pretraining LR each step moves the weights as far as pretraining did, so what was learned is "
             "overwritten; a small LR (and a warm-up while the new head is random) adapts it instead"),
            ("Training is too short: keep the same LR and train for more epochs",
             "more steps at the same LR move the weights even further from the pretrained solution"),
            ("Weight decay is too weak: raise it so the weights stay near where they are",
             "weight decay pulls weights toward zero, not toward the pretrained values; that is L2-SP, a "
             "different penalty"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "finetuning-frozen-batchnorm",
        options=(
            ("SGD with momentum keeps updating parameters that have requires_grad off",
             "a parameter with no gradient (grad None) is skipped by every built-in optimizer, momentum or not"),
            ("Dropout in the new head feeds random noise back into the backbone's layers",
             "dropout changes the head's activations in train mode, not the backbone's stored state"),
            ("BatchNorm in train mode updates its running mean and var from the new data",
             "running statistics are buffers, not parameters: requires_grad does not touch them and train mode "
             "updates them on every forward; keep the frozen backbone in eval()"),
            ("The optimizer's weight decay keeps shrinking the frozen weights each step",
             "decay is applied inside step() only to parameters that have a gradient; frozen ones are skipped"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "finetuning-lora-parameter-count",
        options=(
            ("16,777,216: every entry of W still receives an update",
             "that is full fine-tuning; with LoRA, W is frozen and only the two small matrices train"),
            ("32,768: only B (4096 x 8) trains, A stays as initialised",
             "both A and B are trainable; only their initialisation differs (A random, B zero)"),
            ("33,554,432: W plus a full-size B @ A, both of them trained",
             "W is frozen, and B @ A is never stored as a parameter: only its two thin factors are"),
            ("65,536: A is 8 x 4096 and B is 4096 x 8, both trained",
             "r * (in + out) = 8 * 8192 = 65,536, about 0.4% of W's 16.8 M: with Adam's two states per value, the "
             "optimizer memory shrinks by the same factor"),
        ),
        key="d",
    )
)
