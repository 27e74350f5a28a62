"""14-unfreeze, the judge.

The head always trainable; block i of n trainable exactly from epoch every * (n - i), whatever the flags
were before the call.
"""

from __future__ import annotations

from typing import Any

from harness.checks.lesson14.unfreeze import block_names, unfreeze_cases, unfreeze_model
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson14.common import ATTRIBUTE_HINT, attribute_cause, attribute_names


def _block_of(name: str) -> str:
    return ".".join(name.split(".")[:2])


@judges(
    "14-unfreeze",
    hints=Hints(
        nudge="Each call decides every flag: the head always trains; block i of n unfreezes from epoch "
              "every * (n - i), so the last block (next to the head) is first.",
        concept="Gradual unfreezing trains the new head alone first, then unfreezes one block at a time from the top "
                "down, so that the large, noisy gradients of a random head never reach the general early layers. "
                "requires_grad_(flag) on a block sets all its parameters; setting the flag both ways on every call "
                "makes the function independent of the model's state before it.",
        solution="blocks = [b for b in model.backbone if list(b.parameters())]; for i, block in enumerate(blocks): "
                 "block.requires_grad_(epoch >= every * (len(blocks) - i)); model.head.requires_grad_(True)",
        section="5. Gradual unfreezing"),
    requires={
        "head-frozen": Requirement(
            "the head is trainable at every epoch",
            hint="Print [n for n, p in model.head.named_parameters() if not p.requires_grad] after a call at epoch "
                 "0: is the head trainable?"),
        "not-frozen": Requirement(
            "blocks not yet due are frozen, also when the model came in trainable",
            hint="Call your function at epoch 0 on a freshly built model (everything trainable): is the backbone "
                 "frozen afterwards? Each call must set both directions."),
        "wrong-order": Requirement(
            "blocks unfreeze from the top (the last block, next to the head) down to the first",
            hint="Print which block is trainable at epoch `every`: the one next to the head, or the first?"),
        "wrong-timing": Requirement(
            "block i of n is trainable from epoch every * (n - i) on, and frozen before it, for a backbone of any "
            "number of blocks",
            hint="Tabulate, for epochs 0 to 3 * every + 1, which blocks your function leaves trainable, and compare "
                 "with every * (n - i): an off-by-one (> instead of >=), or blocks counted from the wrong end?"),
    },
)
def judge_unfreeze(seen: dict, *, case: Case) -> str:
    """The head always trainable; block i of n trainable exactly from epoch every * (n - i), whatever the flags
    were before the call."""
    runs, attributes = seen["runs"], seen["attributes"]
    cases = unfreeze_cases(case)
    if not (isinstance(runs, list) and isinstance(attributes, list) and len(runs) == len(attributes) == 2 * len(cases)):
        raise WireError("malformed observation: not two runs per model")
    for index, (architecture, width, every) in enumerate(cases):
        model = unfreeze_model(case, index, architecture, width)
        names = [n for n, _ in model.named_parameters()]
        blocks = block_names(model)
        epochs = every * len(blocks) + 2
        came_trainable, came_frozen = (_flag_table(runs[2 * index + k], names, epochs) for k in (0, 1))
        assigned = [attribute_names(attributes[2 * index + k]) for k in (0, 1)]
        want = [[_due(name, epoch, every, blocks) for name in names] for epoch in range(epochs)]
        what = f"a backbone of {len(blocks)} blocks, every={every}"
        for table, came, attrs in ((came_frozen, "frozen", assigned[1]), (came_trainable, "trainable", assigned[0])):
            for epoch, (got, expected) in enumerate(zip(table, want, strict=True)):
                if got == expected:
                    continue
                head = [n for n, flag in zip(names, got, strict=True) if n.startswith("head.") and not flag]
                if head and "head" in _unchanged_assigned(table, names, attrs, ["head"]):
                    fail("head-frozen", observed=f"the model came in {came}; after the call at epoch {epoch} ({what}), "
                         f"{head} do not require grad", expected="the head trainable at every epoch",
                         cause=attribute_cause(["head"]), where="model.head.requires_grad_(True) in every call",
                         hint=ATTRIBUTE_HINT)
                if head:
                    fail("head-frozen", observed=f"after the call at epoch {epoch} ({what}), {head} do not require "
                         "grad", expected="the head trainable at every epoch",
                         cause="the head is frozen with the backbone (model.requires_grad_(False) and no unfreezing "
                               "of the head), or its flag is never set and the model came in frozen",
                         where="model.head.requires_grad_(True) in every call")
                if came == "trainable" and came_frozen == want:
                    early = sorted({_block_of(n) for n, flag, w in zip(names, got, expected, strict=True)
                                    if flag and not w})
                    fail("not-frozen", observed=f"the model came in trainable; after the call at epoch {epoch} "
                         f"({what}) the blocks {early} are still trainable", expected="blocks not yet due frozen",
                         cause="the function only unfreezes (sets requires_grad True when a block is due) and never "
                               "freezes the blocks that are not due yet",
                         where="set each block's flag both ways: block.requires_grad_(epoch >= ...)")
                unchanged = _unchanged_assigned(table, names, attrs, blocks)
                if unchanged:
                    fail("wrong-timing", observed=f"the model came in {came}; at epoch {epoch} ({what}) the trainable "
                         f"blocks are {_trainable_blocks(table[epoch], names, blocks)}, and the flags of {unchanged} "
                         "are the same at every epoch", expected="block i of n trainable from epoch every * (n - i) on",
                         cause=attribute_cause(unchanged),
                         where="block.requires_grad_(epoch >= every * (n - i)), the method with the underscore",
                         hint=ATTRIBUTE_HINT)
                _fail_schedule(table, names, blocks, every, epoch, what, len(list(model.backbone.children())))
    return "head always trainable, blocks unfrozen from the top down at every * (n - i), whatever came in"


def _unchanged_assigned(table: list[list[bool]], names: list[str], attrs: list[str], parts: list[str]) -> list[str]:
    """Those of `parts` (blocks, or the head) that got a plain requires_grad attribute, on themselves or on a module
    above them, and whose parameters' flags are the same at every epoch."""
    def covered(part: str) -> bool:
        return any(part == a or part.startswith(a + ".") or not a for a in attrs)

    def constant(part: str) -> bool:
        columns = [i for i, name in enumerate(names) if name == part or name.startswith(part + ".")]
        return len({tuple(row[i] for i in columns) for row in table}) == 1

    return [part for part in parts if covered(part) and constant(part)]


def _trainable_blocks(row: list[bool], names: list[str], blocks: list[str]) -> list[str]:
    return [b for b in blocks if all(flag for n, flag in zip(names, row, strict=True) if _block_of(n) == b)]


def _due(name: str, epoch: int, every: int, blocks: list[str]) -> bool:
    if name.startswith("head."):
        return True
    index = blocks.index(_block_of(name))
    return epoch >= every * (len(blocks) - index)


def _flag_table(value: Any, names: list[str], epochs: int) -> list[list[bool]]:
    if not (isinstance(value, list) and len(value) == epochs and all(
            isinstance(row, list) and len(row) == len(names) and all(isinstance(f, bool) for f in row)
            for row in value)):
        raise WireError("malformed observation: the flags are not one row per epoch, one flag per parameter")
    return value


def _schedule_cause(table: list[list[bool]], names: list[str], blocks: list[str], every: int, children: int) -> str:
    """The slip whose schedule `table` follows exactly; the candidates when it follows none of them."""
    n = len(blocks)
    slips = {
        "an off-by-one in the epoch test (> instead of >=)": lambda e, i: e > every * (n - i),
        f"a fixed number of blocks (3, a TransferNet's) instead of this backbone's {n}": lambda e, i: (
            e >= every * (3 - i)),
        "all blocks unfrozen at once": lambda e, i: e >= every,
        f"every child of the backbone counted as a block ({children}, pooling and flatten included), not only "
        "those with parameters": lambda e, i: e >= every * (children - i),
        "no block's flag ever changes: for example a loop over the block's direct parameters only "
        "(parameters(recurse=False): a block's parameters sit in its layers)": lambda e, i: bool(
            table[0][names.index(next(m for m in names if _block_of(m) == blocks[i]))]),
    }
    if n == 3:
        del slips[next(cause for cause in slips if cause.startswith("a fixed number of blocks"))]
    fits = [cause for cause, due in slips.items()
            if all(row == [name.startswith("head.") or due(e, blocks.index(_block_of(name))) for name in names]
                   for e, row in enumerate(table))]
    if len(fits) == 1:
        return fits[0]
    if fits:
        return "one of these, which give the same schedule here: " + "; or ".join(fits)
    return ("the epoch test: one of an off-by-one (> instead of >=), all blocks at once, a fixed number of blocks "
            "instead of the backbone's, or a layer without parameters counted as a block")


def _fail_schedule(table: list[list[bool]], names: list[str], blocks: list[str], every: int, epoch: int,
                   what: str, children: int) -> None:
    """Fail with wrong-order when the blocks unfreeze bottom-up at the right epochs, else with wrong-timing."""
    def trainable_blocks(row: list[bool]) -> list[str]:
        return _trainable_blocks(row, names, blocks)

    partial = [b for b in blocks if len({flag for n, flag in zip(names, table[epoch], strict=True)
                                          if _block_of(n) == b}) > 1]
    got = trainable_blocks(table[epoch])
    wanted = [b for i, b in enumerate(blocks) if epoch >= every * (len(blocks) - i)]
    bottom_up = all(trainable_blocks(row) == blocks[:len([b for i, b in enumerate(blocks)
                                                           if e >= every * (len(blocks) - i)])]
                    for e, row in enumerate(table))
    if bottom_up and not partial:
        fail("wrong-order", observed=f"at epoch {epoch} ({what}) the trainable blocks are {got}",
             expected=f"{wanted}: the top block (next to the head) unfreezes first",
             cause="the blocks are counted from the bottom: block 0 (edges and colours, the most general) unfreezes "
                   "first instead of last", where="block i of n unfreezes at every * (n - i)")
    fail("wrong-timing", observed=f"at epoch {epoch} ({what}) the trainable blocks are {got}"
         + (f", and {partial} are partly trainable" if partial else ""),
         expected=f"{wanted} (block i of n trainable from epoch every * (n - i) on)",
         cause="only some parameters of a block were set (a loop over a block's direct parameters only)" if partial
         else _schedule_cause(table, names, blocks, every, children),
         where="blocks = the backbone's children that have parameters; block.requires_grad_(epoch >= every * (n - i))")
