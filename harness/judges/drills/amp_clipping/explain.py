"""The AMP and clipping explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "amp-why-scaler",
        options=(
            ("bf16 only: its short mantissa loses small gradients",
             "bf16's 8 bits of mantissa cost precision, not range: a scale factor cannot restore lost digits"),
            ("both bf16 and fp16: any 16-bit gradient needs it",
             "bf16 has fp32's 8 exponent bits, so small gradients do not underflow: scaling adds nothing"),
            ("fp16 only: its narrow range flushes small gradients",
             "right: fp16's smallest normal is ~6e-5 (subnormal ~6e-8); scaling the loss moves gradients into range"),
            ("neither: autocast keeps the gradients in fp32 already",
             "parameters' .grad are fp32, but the backward of fp16 ops computes fp16 intermediates that underflow"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "clipping-why-rnn",
        options=(
            ("to save memory: clipped gradients take fewer bytes to store",
             "clipping rescales values in place; a tensor's size does not depend on its values"),
            ("to make training deterministic from run to run",
             "determinism comes from seeds and deterministic kernels; clipping changes no source of randomness"),
            ("clipping speeds up the forward pass of the recurrent layers",
             "clipping touches gradients after backward; the forward pass is unchanged"),
            ("BPTT multiplies many Jacobians, so gradients can explode",
             "right: over T steps the gradient is a product of T Jacobians and grows geometrically; one step can "
             "wreck the weights unless its norm is capped"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "amp-autocast-op-dtypes",
        options=(
            ("y is bfloat16 and z is bfloat16",
             "add is not on autocast's cast lists: it follows type promotion, and bf16 + fp32 promotes to fp32"),
            ("y is bfloat16 and z is float32",
             "right: matmul is on the lower-precision list, so y is bf16; add just promotes bf16 + fp32 to fp32"),
            ("y is float32 and z is float32",
             "matmul is exactly the kind of op autocast runs in bf16: y comes out bf16"),
            ("y is float32 and z is bfloat16",
             "matmul runs in bf16 under autocast, and nothing would turn an fp32 sum into bf16"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "amp-bf16-master-weights",
        options=(
            ("about 1.1: bf16 adds each 1e-3 just as float32 does",
             "that needs a spacing smaller than 1e-3 near 1.0; bf16's is 2^-7 = 0.0078"),
            ("infinite: bf16 overflows after repeated additions",
             "bf16 has fp32's exponent range (max ~3e38); 1.1 is nowhere near it"),
            ("still 1.0: each +1e-3 rounds back to 1.0 in bf16",
             "right: bf16 has 8 significant bits, so 1.001 rounds to 1.0; that is why autocast keeps the weights "
             "(and the optimizer's update) in float32"),
            ("about 1.008: bf16 rounds the first update up to one spacing",
             "round-to-nearest sends 1.001 down to 1.0, not up to 1.0078, and it does so at every step"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "clipping-value-vs-norm",
        options=(
            ("both leave [0.6, 0.8]: either rescales the whole vector",
             "only the norm version rescales; value clipping caps each element on its own"),
            ("value: [3.0, 4.0] unchanged; norm: [0.6, 0.8]",
             "clip_grad_value_ caps every element whose magnitude exceeds 1.0, so both elements change"),
            ("value: [1.0, 1.0]; norm: [1.0, 1.0] as well",
             "norm clipping divides by the norm (5) and keeps the direction: [0.6, 0.8]"),
            ("value: [1.0, 1.0]; norm: [0.6, 0.8]",
             "right: value clipping caps each element (and turns the direction); norm clipping scales the vector "
             "to norm 1 and keeps its direction"),
        ),
        key="d",
    )
)
