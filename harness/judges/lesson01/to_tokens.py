"""01-to-tokens, the judge.

`to_tokens(images)` is (N, H*W, C) with token h*W + w the channel vector of pixel (h, w), input untouched.
"""

from __future__ import annotations

import torch

from harness.checks.lesson01.to_tokens import token_inputs
from harness.contract.case import Case
from harness.contract.compare import same_values
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.recorded import recorded
from harness.contract.registry import judges
from harness.judges.lesson01.common import _recorded_tensor, _require_tensor


@recorded
def _reference_tokens(images: torch.Tensor) -> torch.Tensor:
    return images.flatten(2).transpose(1, 2)


def _fail_wrong_order(tokens: torch.Tensor, x: torch.Tensor) -> None:
    """Fail for tokens of the right shape in the wrong order, naming the regrouping they match when one does."""
    n, c, h, w = x.shape
    if h != w and same_values(tokens, x.permute(0, 3, 2, 1).reshape(n, h * w, c), dtype=False):
        fail("wrong-order",
             observed=f"right shape, but for images of H={h}, W={w} your tokens run down each column: token "
                      f"w*H + h holds pixel (h, w) (your result equals images.permute(0, 3, 2, 1).reshape(N, H*W, C))",
             expected="tokens[n, h*W + w, c] == images[n, c, h, w]: row by row, each row's pixels left to right",
             cause="the axes permuted to (N, W, H, C), W before H, so merging them orders the pixels column by "
                   "column instead of row by row",
             where="the permute order: (0, 2, 3, 1) keeps H before W and moves only the channels last",
             hint="Which axis of images is H and which is W? After the permute, H must come before W for token "
                  "h*W + w to be pixel (h, w).")
    if same_values(tokens, x.reshape(n, h * w, c), dtype=False):
        fail("wrong-order",
             observed="right shape, but tokens[n, h*W + w] is not the channel vector images[n, :, h, w] (your result "
                      "equals images.reshape(N, H*W, C))",
             expected="tokens[n, h*W + w, c] == images[n, c, h, w]",
             cause="reshape/view without permute regroups the numbers in memory order: each 'token' "
                   "then mixes one channel's neighbouring pixels instead of holding one pixel's channels",
             where="permute the channel axis to the end before merging H and W")
    fail("wrong-order", observed="right shape, but tokens[n, h*W + w] is not the channel vector images[n, :, h, w]",
         expected="tokens[n, h*W + w, c] == images[n, c, h, w]",
         cause="the numbers are regrouped in another order than (N, H, W, C) before H and W are merged: an axis "
               "order other than permute(0, 2, 3, 1), or a merge without a permute",
         where="permute the channel axis to the end (keeping H before W) before merging H and W")


@judges("01-to-tokens", hints=Hints(
    nudge="Bring the channel axis last first, then merge H and W. Only one of view/reshape works after a permute.",
    concept="permute moves the axes (a view with new strides); view() can only reinterpret memory whose strides "
            "allow it, while reshape() copies when it must. Merging axes without permuting regroups the numbers "
            "in memory order.",
    solution="n, c, h, w = images.shape; return images.permute(0, 2, 3, 1).reshape(n, h * w, c)",
    section="2. Views and copies"),
    requires={
        "not-a-tensor": Requirement("returns a torch.Tensor",
                                    hint="What does your function return? Keep the result a tensor (no .numpy())."),
        "view-on-non-contiguous": Requirement(
            "works for any input memory layout (cropped, channels-last, strided)",
            hint="Print images.permute(0, 2, 3, 1).is_contiguous(): which of view and reshape accepts that?"),
        "input-modified": Requirement(
            "does not modify its input",
            hint="Which of your operations end in an underscore? Those change the tensor they are called on."),
        "wrong-shape": Requirement("returns shape (N, H*W, C)",
                                   hint="Print the shape you return for a (2, 3, 4, 5) input: is it (2, 20, 3)?"),
        "wrong-order": Requirement(
            "token h*W + w holds the C channel values of pixel (h, w)",
            hint="Compare tokens[0, 0] with images[0, :, 0, 0]: are they the same C numbers?"),
    })
def judge_to_tokens(seen: dict, *, case: Case) -> str:
    """`to_tokens(images)` is (N, H*W, C) with token h*W + w the channel vector of pixel (h, w), input untouched."""
    for x, entry in zip(token_inputs(case), seen["results"], strict=True):
        if "view_error" in entry:
            fail("view-on-non-contiguous", observed=f"to_tokens raised RuntimeError: {entry['view_error']}",
                 expected="a (N, H*W, C) tensor for any input layout",
                 cause="view() only reinterprets the existing memory: after permute()/transpose(), or on an input "
                       "that is not contiguous (a crop, channels-last), the strides do not allow the new shape",
                 where="use reshape() (copies when it must) instead of view()")
        tokens = _require_tensor(entry["tokens"], "to_tokens", "the return statement of to_tokens")
        after = _recorded_tensor(entry, "input_after")
        if after.shape != x.shape or not same_values(after, x, dtype=False):
            fail("input-modified", observed="the input images changed", expected="the input left untouched",
                 cause="an in-place operation on the input (a method ending in _, such as transpose_)",
                 where="use out-of-place operations in to_tokens")
        n, c, h, w = x.shape
        if tuple(tokens.shape) != (n, h * w, c):
            fail("wrong-shape", observed=f"shape {tuple(tokens.shape)} for input {tuple(x.shape)}",
                 expected=f"{(n, h * w, c)} = (N, H*W, C)",
                 cause="the axes are merged or ordered differently from (N, H*W, C)",
                 where="the permute order and the reshape sizes in to_tokens")
        if not same_values(tokens, _reference_tokens(x), dtype=False):
            _fail_wrong_order(tokens, x)
    return ("(N, C, H, W) -> (N, H*W, C) with each token the channel vector of one pixel, for contiguous, cropped, "
            "channels-last and strided inputs")
