"""13-checkpoint, the judge.

Output and gradients equal the plain forward's with the same dropout masks; only block inputs saved; each
block run again on its own in backward. A wrong gradient is traced to its cause by what was observed: blocks
without any gradient (the graph cut between them), a block rerun in another one's place (a late-bound
lambda), or gradients equal to those of a forward checkpointed with preserve_rng_state=False.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from harness.checks.lesson13.checkpoint import checkpoint_cases, checkpoint_inputs
from harness.contract.case import Case
from harness.contract.compare import close_norm, close_values, judged, matching_tensors, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson13.common import _flat


@judges(
    "13-checkpoint",
    hints=Hints(
        nudge="Which call runs a block without keeping its activations, and recomputes them in backward? Each "
        "block's output feeds the next, so every block goes through it.",
        concept="torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False) runs fn without keeping its "
        "activations and runs it again in backward; it restores the RNG state so dropout draws the same mask. "
        "The reentrant variant gives no parameter gradients when no input requires grad.",
        solution="h = x\nfor block in blocks:\n    h = checkpoint(block, h, use_reentrant=False)\nreturn h",
        section="4. Activation checkpointing: memory for time",
    ),
    requires={
        "wrong-output": Requirement("returns what running the blocks in order returns",
                                    hint="Compare with a plain loop over the blocks, under the same seed."),
        "no-param-grads": Requirement(
            "the parameters get gradients in backward, even though the input does not require grad",
            hint="Does your output have a grad_fn? Which checkpoint variant needs an input that requires grad?"),
        "reentrant": Requirement(
            "uses the non-reentrant checkpoint (use_reentrant=False)",
            hint="Which value of use_reentrant does the lesson recommend, and what does the other one do?"),
        "wrong-grads": Requirement(
            "the gradients equal those of the plain forward (the same dropout masks in the recomputation)",
            hint="Dropout draws a new mask each call: what must checkpoint restore before it runs a block again?"),
        "not-checkpointed": Requirement(
            "every block is checkpointed: autograd keeps only each block's input outside the checkpoints",
            hint="Count what is saved for backward with harness.memory.saved_for_backward: which block still "
            "keeps its activations?"),
        "one-checkpoint": Requirement(
            "each block in its own checkpoint call, so that backward recomputes one block at a time",
            hint="Put a print in each block's forward (register_forward_pre_hook) and run backward: how many "
            "blocks run again before the first gradient arrives?"),
    },
)
def judge_checkpoint(seen: dict, *, case: Case) -> str:
    """Output and gradients equal the plain forward's with the same dropout masks; only block inputs saved."""
    for (seed, batch, width, depth), result in judged(checkpoint_cases(case), seen["results"]):
        blocks, x, upstream = checkpoint_inputs(seed, batch, width, depth)
        torch.manual_seed(seed)
        h = x
        for block in blocks:
            h = block(h)
        h.backward(upstream)
        out, grad_fn, grads, saved = result["out"], result["grad_fn"], result["grads"], result["saved"]
        what = f"{depth} blocks of width {width}, batch {batch}"
        if not close_values(out, h.detach(), atol=1e-5, dtype=False):
            fail("wrong-output", observed=f"returned {type_name(out)}" + (
                f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else "") + " that differs from "
                 f"running the blocks in order ({what})", expected=f"the output of shape {tuple(h.shape)}",
                 cause=_output_cause(out, (seed, batch, width, depth)),
                 where="the loop over blocks and the return statement")
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
        got_grads = matching_list(grads, len(want))
        _judge_graph_reaches_every_block(got_grads, depth, what)
        got = matching_tensors([torch.zeros_like(w) if g is None else g for g, w in zip(got_grads, want, strict=True)],
                               want, "grads")
        if not close_norm(_flat(got), _flat(want), rel=1e-4, floor=1e-9):
            fresh_masks = _unpreserved_grads(seed, batch, width, depth)
            swapped = _rerun_in_place_of(result["backward"])
            cause = ("the recomputation in backward does not repeat the forward: one of preserve_rng_state=False (new "
                     "dropout masks), a block whose forward depends on state that changed between forward and "
                     "backward, or a different random state")
            hint = None
            if swapped:
                cause = (f"in backward, the checkpoint of block {swapped[1]} ran block {swapped[0]} again: the "
                         "function given to checkpoint finds its block when backward runs (a lambda or closure "
                         "that reads the loop variable late), not the block it was made for; bind it: lambda t, "
                         "block=block: block(t), or pass the block itself")
                hint = ("Backward calls your function again after the loop has ended: which block does the name "
                        "inside your lambda refer to by then?")
            elif close_norm(_flat(got), _flat(fresh_masks), rel=1e-4, floor=1e-9):
                cause = ("preserve_rng_state=False: the recomputation drew new dropout masks (your gradients are "
                         "exactly those of a checkpointed forward with preserve_rng_state=False)")
            fail("wrong-grads", observed=f"the parameters' gradients differ from the plain forward's ({what})",
                 expected="the same gradients: checkpointing changes memory and time, never the result",
                 cause=cause, where="the checkpoint call's arguments", hint=hint)
        if not isinstance(saved, list) or not all(isinstance(s, list) and all(isinstance(d, int) for d in s)
                                                  for s in saved):
            raise WireError("malformed observation: saved shapes are not lists of ints")
        kept = sum(_numel(s) for s in saved)
        allowed = depth * batch * width
        hooked = bool(_block_events(result["forward"], "forward"))  # the blocks ran through their module call
        rerun = {index for kind, index in _block_events(result["backward"], "backward") if kind == "run"}
        if kept > allowed:
            plain = [index for index in range(depth) if index not in rerun] if hooked else []
            fail("not-checkpointed", observed=f"autograd kept {kept} values for backward outside checkpoints "
                 f"({len(saved)} tensors)" + (f"; block(s) {plain} did not run again in backward" if plain else ""),
                 expected=f"at most {allowed}: each block's input ({depth} x {batch} x {width})",
                 cause=(f"block(s) {plain} run outside checkpoint, so their activations are kept" if plain
                        else "a block (or part of one) runs outside checkpoint, so its activations are kept"),
                 where="the loop over blocks: every block goes through checkpoint")
        together = _recomputed_together(result["forward"], result["backward"], depth)
        if together is not None and len(together) > 1:
            fail("one-checkpoint", observed=f"in backward, blocks {together} all ran again before the first of their "
                 f"gradients ({what}): one checkpoint spans {len(together)} blocks",
                 expected="each block run again on its own, right before its gradient: one checkpoint per block",
                 cause="one checkpoint around several blocks (a function that loops over the blocks, checkpointed "
                 "once): it keeps only the first input, but backward rebuilds the activations of all those blocks "
                 "at once, so the peak memory is the plain forward's", where="call checkpoint inside the loop, once "
                 "per block: h = checkpoint(block, h, use_reentrant=False)")
    return ("same output and gradients as the plain forward, with dropout, keeping only each block's input and "
            "recomputing one block at a time")


def _output_cause(out: Any, item: tuple[int, int, int, int]) -> str:
    """What a wrong output equals: the input, or the blocks run with the first or the last one left out (each
    replayed here under the case's seed); the candidates when it equals none of them."""
    seed, batch, width, depth = item
    blocks, x, _ = checkpoint_inputs(seed, batch, width, depth)
    if close_values(out, x, atol=1e-6, dtype=False):
        return "the input x was returned, not the output of the last block"
    replays = {"the first block was left out (the loop starts at the second block)": list(blocks)[1:],
               "the last block was left out (the loop stops one block early)": list(blocks)[:-1]}
    for cause, kept in replays.items():
        torch.manual_seed(seed)
        with torch.no_grad():
            h = x
            for block in kept:
                h = block(h)
        if close_values(out, h, atol=1e-5, dtype=False):
            return cause
    return "a block skipped or applied twice, or a different random state for dropout"


def _judge_graph_reaches_every_block(grads: list[Any], depth: int, what: str) -> None:
    """Fail no-param-grads when some blocks' parameters got no gradient at all: the graph was cut before them."""
    per_block = len(grads) // depth
    cut = [index for index in range(depth) if all(g is None for g in grads[index * per_block:(index + 1) * per_block])]
    if cut:
        fail("no-param-grads", observed=f"after backward, the parameters of block(s) {cut} have no gradient ({what})"
             + ("; the later blocks have theirs" if len(cut) < depth else ""),
             expected="a gradient for every block's parameters",
             cause=f"the graph is cut after block {max(cut)}: a .detach() (or a torch.no_grad(), or .data) between "
             "blocks stops backward there, so the earlier blocks never get a gradient",
             where="the loop over blocks: pass h itself from one checkpoint to the next",
             hint="Which blocks got no gradient? Look at what you pass from one block to the next: what stops "
             "backward on its way to the earlier blocks?")


def _unpreserved_grads(seed: int, batch: int, width: int, depth: int) -> list[torch.Tensor]:
    """The gradients of a per-block checkpointed forward with preserve_rng_state=False: new dropout masks in the
    recomputation, drawn from the global generator where the forward left it."""
    blocks, x, upstream = checkpoint_inputs(seed, batch, width, depth)
    torch.manual_seed(seed)
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)
    h.backward(upstream)
    return [p.grad for p in blocks.parameters()]


def _block_events(value: Any, what: str) -> list[tuple[str, int]]:
    """The recorded events, validated: ("run", i) when block i's forward began, ("grad", i) at its gradient."""
    if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 2 and e[0] in ("run", "grad")
                                              and type(e[1]) is int for e in value):
        raise WireError(f"malformed observation: the {what} events are not [kind, block] pairs")
    return [(kind, index) for kind, index in value]


def _rerun_in_place_of(backward: Any) -> tuple[int, int] | None:
    """(block run, block whose gradient came next) for the first backward rerun followed by another block's
    gradient; None when every rerun block got its own gradient next."""
    events = _block_events(backward, "backward")
    for (kind, index), (next_kind, next_index) in zip(events, events[1:], strict=False):
        if kind == "run" and next_kind == "grad" and next_index != index:
            return index, next_index
    return None


def _recomputed_together(forward: Any, backward: Any, depth: int) -> list[int] | None:
    """The largest set of blocks run again in backward before any of their gradients arrived; None when the
    forward did not run each block once, in order, through its module call (then the hooks saw too little to
    judge)."""
    if _block_events(forward, "forward") != [("run", index) for index in range(depth)]:
        return None
    largest: list[int] = []
    pending: list[int] = []
    for kind, index in _block_events(backward, "backward"):
        if kind == "run":
            pending.append(index)
        else:
            largest, pending = max(largest, pending, key=len), []
    return max(largest, pending, key=len)


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
