"""The sequence explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "sequences-transformer-warmup",
        options=(
            ("The data loader needs the warm-up steps to fill its prefetch queue",
             "data loading affects throughput, never the optimisation: the same batches arrive either way"),
            ("Adam's first variance estimates are noisy: early steps are too big",
             "with one or a few gradients, v is a poor estimate and every coordinate moves by about lr: at full lr "
             "that jolts attention logits and LayerNorm-ed layers; warm-up keeps the early steps small"),
            ("Positional encodings must be learned before attention weights can train",
             "sinusoidal encodings are not learned at all, and learned ones train jointly with attention"),
            ("Warm-up only matters for SGD; with Adam it has no effect on training",
             "it is with Adam (and post-LN Transformers) that warm-up became standard, for its early steps"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "sequences-mha-mask-convention",
        options=(
            ("It works as intended: True marks keys that take part in attention",
             "that is F.scaled_dot_product_attention's convention for a bool attn_mask, not MultiheadAttention's"),
            ("It raises an error, because a key padding mask must be a float tensor",
             "bool masks are accepted (and preferred); float masks are added to the scores instead"),
            ("Real tokens are ignored, padding attended: True means 'mask out'",
             "nn.MultiheadAttention (and nn.Transformer*) read True as 'ignore this key', so the mask is inverted "
             "and no error is raised: the model silently attends to padding"),
            ("The mask is applied only in train mode; in eval every key is attended",
             "masks apply in both modes; only dropout depends on train / eval"),
        ),
        key="c",
    )
)
