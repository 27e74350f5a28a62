"""13-checkpoint, the judge.

Output and gradients equal the plain forward's with the same dropout masks; only block inputs saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness.checks.lesson13.checkpoint import _checkpoint_cases, _checkpoint_inputs
from harness.contract.case import Case
from harness.contract.compare import close_norm, judged, matching_tensors, type_name
from harness.contract.failure import fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson13.common import _flat


@judges("13-checkpoint")
def judge_checkpoint(seen: dict, *, case: Case) -> str:
    """Output and gradients equal the plain forward's with the same dropout masks; only block inputs saved."""
    for (seed, batch, width, depth), result in judged(_checkpoint_cases(case), seen["results"]):
        blocks, x, upstream = _checkpoint_inputs(seed, batch, width, depth)
        torch.manual_seed(seed)
        h = x
        for block in blocks:
            h = block(h)
        h.backward(upstream)
        out, grad_fn, grads, saved = result["out"], result["grad_fn"], result["grads"], result["saved"]
        what = f"{depth} blocks of width {width}, batch {batch}"
        if not isinstance(out, torch.Tensor) or out.shape != h.shape or not torch.allclose(out, h.detach(), atol=1e-5):
            fail("wrong-output", observed=f"returned {type_name(out)}" + (
                f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else "") + " that differs from "
                 f"running the blocks in order ({what})", expected=f"the output of shape {tuple(h.shape)}",
                 cause="a block skipped or applied twice, the input instead of the last output returned, or a "
                 "different random state for dropout", where="the loop over blocks and the return statement")
        if grads is None:
            fail("no-param-grads", observed="the output does not require grad: backward cannot reach the blocks' "
                 "parameters", expected="an output attached to the graph", cause="use_reentrant=True (or not passed, "
                 "which means True here) with an input that does not require grad, a forward under torch.no_grad(), "
                 "or a .detach()", where="the checkpoint call")
        if grad_fn is not None and not isinstance(grad_fn, str):
            raise WireError("malformed observation: grad_fn is not a name")
        if grad_fn is not None and "CheckpointFunction" in grad_fn:
            fail("reentrant", observed=f"the output's grad_fn is {grad_fn}: the reentrant checkpoint ran",
                 expected="the non-reentrant checkpoint", cause="use_reentrant=True, or use_reentrant not passed "
                 "(which means True, with a warning)", where="the checkpoint call: pass use_reentrant=False")
        want = [p.grad for p in blocks.parameters()]
        got = [torch.zeros_like(w) if g is None else g for g, w in
               zip(matching_list(grads, len(want)), want, strict=True)]
        got = matching_tensors(got, want, "grads")
        if not close_norm(_flat(got), _flat(want), rel=1e-4, floor=1e-9):
            fail("wrong-grads", observed=f"the parameters' gradients differ from the plain forward's ({what})",
                 expected="the same gradients: checkpointing changes memory and time, never the result",
                 cause="preserve_rng_state=False: the recomputation draws new dropout masks; or the blocks ran "
                 "under a different random state", where="the checkpoint call's arguments")
        if not isinstance(saved, list) or not all(isinstance(s, list) and all(isinstance(d, int) for d in s)
                                                  for s in saved):
            raise WireError("malformed observation: saved shapes are not lists of ints")
        kept = sum(_numel(s) for s in saved)
        allowed = depth * batch * width
        if kept > allowed:
            fail("not-checkpointed", observed=f"autograd kept {kept} values for backward outside checkpoints "
                 f"({len(saved)} tensors)", expected=f"at most {allowed}: each block's input ({depth} x {batch} x "
                 f"{width})", cause="a block (or part of one) runs outside checkpoint, so its activations are kept",
                 where="the loop over blocks: every block goes through checkpoint")
    return "same output and gradients as the plain forward, with dropout, keeping only each block's input"


def matching_list(value: Any, length: int) -> list[Any]:
    """`value` checked to be a list of `length` items (WireError otherwise)."""
    if not isinstance(value, list) or len(value) != length:
        raise WireError("malformed observation: not one gradient per parameter")
    return value


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count
