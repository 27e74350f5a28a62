"""Judges of lesson 11 (interview drills): each task's verdict is its drill's (`harness.checks.lesson11`).

A write or bughunt task is judged by the drill's own judge; an explain task by the bank's key and options, on the
letter or on an option copied as the notebook prints it. What lesson 11 adds is declared here, with the judges: the
teaching of a graded exercise, a requirement table (one row per failure code the drill's judge gives, its hint a
nudge about that mistake) and three levels of hints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import harness.checks.lesson11  # noqa: F401 (the probes register the tasks before their judges)
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.drills.choices import LETTERS, Choices, letter_of
from harness.drills.core import Drill, get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS, SECTIONS, answer_name

_MARKED = re.compile(r"\(?([a-d])\)\s*(.*)", re.IGNORECASE | re.DOTALL)  # "(b) text" or "b) text"


def _plain(text: str) -> str:
    """`text` compared loosely: case, runs of white space and a final full stop ignored."""
    return " ".join(text.lower().split()).rstrip(".")


def _chosen_letter(answer: str, choices: Choices) -> str | None:
    """The letter `answer` chooses: a letter as `letter_of` reads it, or an option's text as the notebook prints
    it, after its "(b) " marker (whose letter must be that option's) or without it; None for anything else."""
    letter = letter_of(answer)
    if letter is not None:
        return letter
    text = answer.strip().removeprefix("-").strip()  # a line of the notebook's list: "- (b) ..."
    marked = _MARKED.fullmatch(text)
    texts = [_plain(option.text) for option in choices.options]
    if marked:
        letter = marked.group(1).lower()
        return letter if _plain(marked.group(2)) == texts[LETTERS.index(letter)] else None
    return LETTERS[texts.index(_plain(text))] if _plain(text) in texts else None


def _no_choice_cause(answer: object) -> str:
    """Why `answer` chooses no option, from what it is."""
    if not isinstance(answer, str):
        return f"the answer is {type(answer).__name__}, not a string: the starter's answer was not replaced"
    if _MARKED.fullmatch(answer.strip().removeprefix("-").strip()):
        return "the text after the letter is not that option's text: write the letter alone"
    return "more or less than one letter, and not an option's text"


def _hints(drill: Drill, task_id: str, solution: str) -> Hints:
    """The drill's two hints as the nudge and the concept, `solution` as the last level, and the task's section."""
    nudge, concept = drill.hints[:2]
    return Hints(nudge=nudge, concept=concept, solution=solution, section=SECTIONS[task_id])


def _judge_drill(task_id: str, solution: str, requires: Mapping[str, Requirement]) -> None:
    """Judge the write or bughunt drill of `task_id` with the drill's own judge, under the lesson's teaching.

    Args:
        task_id: the notebook's task id.
        solution: the last level of hints (one line).
        requires: the requirement table of the drill's failure codes (the `missing-entry` row, which the probe
            gives, is added here).
    """
    drill = get_drill(_DRILL_OF[task_id])
    names = " and ".join(f"`{name}`" for name in _ENTRIES.get(task_id, (drill.entry,)))
    table = {"missing-entry": Requirement(
        f"the answer defines {names} under that name",
        hint=f"The check looks for {names} in the cell's names: was one renamed, or was its cell not run?"), **requires}

    def judge(seen: dict, *, case: Case) -> str:
        """The drill's judge."""
        return get_drill(drill.id).judge(seen, case=case)  # type: ignore[misc]

    judges(task_id, hints=_hints(drill, task_id, solution), requires=table, nonfinite=drill.nonfinite)(judge)


def _judge_explain(task_id: str) -> None:
    """Judge `task_id`'s answer variable as one of the bank's letters. Its last hint sends the student to the
    experiment, in the notebook or the terminal: the key is the judge side's, and a graded student tree withholds
    it (`harness drill solution` says so there), so the hint does not point to it."""
    drill_id = _DRILL_OF[task_id]
    variable = answer_name(task_id)
    solution = (f"Run the experiment below the test cell (or `harness drill experiment {drill_id}` in a terminal): "
                "the option that says what it prints is the answer.")

    def judge(seen: dict, *, case: Case) -> str:
        """The bank's key and options, on the letter ("b", "B", "(b)" or "b)"; "ab" is no choice) or on an option
        copied as the notebook prints it ("(b) dropout stops dropping; ...", with or without its letter)."""
        choices = get_drill(drill_id).choices
        assert choices is not None  # an answered explain drill has them (Drill checks it)
        answer = seen.get("answer")
        letter = _chosen_letter(answer, choices) if isinstance(answer, str) else None
        if letter is None:
            fail("no-choice", observed=f"answer = {answer!r}"[:160],
                 expected=f"one letter: {', '.join(repr(c) for c in LETTERS)}",
                 cause=_no_choice_cause(answer), where=f"the line `{variable} = ...`")
        chosen = LETTERS.index(letter)
        if chosen != choices.key:
            fail("wrong-choice", observed=f"you chose {answer!r}: {choices.options[chosen].text}",
                 expected="another choice", cause=choices.options[chosen].why,
                 where="the experiment below the test cell, and what it prints")
        return choices.options[choices.key].why

    judges(task_id, hints=_hints(get_drill(drill_id), task_id, solution), requires={
        "no-choice": Requirement(f'the answer is one letter of the choices: {variable} = "<letter>"',
                                 hint=f"Set the answer to one of the letters {', '.join(LETTERS)}, as a string."),
        "wrong-choice": Requirement(
            "the answer is the right choice",
            hint="Run the experiment below the test cell: what does it show, and which choice says that?"),
    })(judge)


_DRILL_OF = dict(NOTEBOOK_DRILLS)
# The names a drill's probe reads from the answer, where there are several (otherwise the drill's entry).
_ENTRIES = {"11-exact-resume": ("save_checkpoint", "load_checkpoint")}

_judge_drill(
    "11-train-step",
    solution="model.train(); optimizer.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); loss.backward(); "
    "optimizer.step(); return loss.detach()",
    requires={
        "not-train-mode": Requirement(
            "the model is in training mode during the step",
            hint="The model was handed over in eval mode: which call switches dropout and batch norm back on?"),
        "step-count": Requirement(
            "one optimizer step per call",
            hint="Count the optimizer steps one call of train_step takes: how many should there be?"),
        "update-outside-step": Requirement(
            "the parameters change only through optimizer.step()",
            hint="Something besides optimizer.step() changed the weights between two steps: what else writes to them?"),
        "step-before-backward": Requirement(
            "backward runs before the optimizer steps",
            hint="The optimizer found no gradient when it stepped: in what order do backward and step run?"),
        "missing-zero-grad": Requirement(
            "each step uses the gradient of its own batch",
            hint="Step 2 did not use batch 2's gradient alone: what clears .grad, and when?"),
        "host-sync": Requirement(
            "no host sync in the step (no .item(), float() or print of a tensor)",
            hint="Which call in train_step copies a value to Python, and why does that stall a GPU?"),
        "not-a-tensor": Requirement("returns the loss as a one-element tensor",
                                    hint="What does train_step return? The text asks for the loss, as a tensor."),
        "loss-not-detached": Requirement(
            "the returned loss is detached from the graph",
            hint="The returned loss still requires grad: it keeps the whole graph of the step alive."),
        "wrong-loss": Requirement(
            "the returned loss is the batch's loss at the weights the step started from",
            hint="The returned value is not the loss the step trained on: when, and on what, was it computed?"),
    },
)

_judge_drill(
    "11-plain-list",
    solution="self.hidden = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1])])",
    requires={
        "unregistered-layers": Requirement(
            "every layer's weights are registered (the optimizer and .to() see them)",
            hint="Count model.parameters(): some layers are missing. How does nn.Module find its submodules?"),
        "not-a-tensor": Requirement("forward returns a tensor",
                                    hint="What does forward return? Print type(model(x))."),
        "wrong-shape": Requirement("the output has one row per input and sizes[-1] columns",
                                   hint="Print the output's shape for a few size lists: is every layer applied?"),
        "wrong-value": Requirement(
            "the forward is the starter's: each hidden layer then ReLU, then the output layer",
            hint="The fix should change how the layers are stored, not what forward computes: "
            "compare with the starter."),
    },
)

_judge_explain("11-why-eval")

_judge_drill(
    "11-warmup-cosine",
    solution="return (step + 1) / warmup if step < warmup else "
    "0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(1, total - warmup), 1.0)))",
    requires={
        "wrong-warmup": Requirement("(step + 1) / warmup during warmup, reaching 1 at the last warmup step",
                                    hint="The message names the step: compute the warmup factor there by hand."),
        "wrong-decay": Requirement("then 0.5 * (1 + cos(pi * p)), from 1 at step = warmup to 0 at total",
                                   hint="The message names the step: what is p there, and what is the factor?"),
        "not-clamped": Requirement("0 after total", hint="What is p after total, and what does the cosine do there?"),
    },
)

_judge_drill(
    "11-amp-step",
    solution='model.train(); optimizer.zero_grad(set_to_none=True); '
    'with torch.autocast("cpu", dtype=torch.bfloat16): loss = loss_fn(model(x), y); '
    "scaler.scale(loss).backward(); scaler.unscale_(optimizer); "
    "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); scaler.update()",
    requires={
        "not-train-mode": Requirement(
            "the model is in training mode during the step",
            hint="The model was handed over in eval mode: which call switches dropout and batch norm back on?"),
        "no-autocast": Requirement("the forward and the loss run under bf16 autocast on the CPU",
                                   hint="Which context makes the forward run in bfloat16, and what must it wrap?"),
        "backward-inside-autocast": Requirement(
            "backward runs outside autocast", hint="Where does the autocast block end, and is backward inside it?"),
        "stale-gradients": Requirement(
            "each step uses its own batch's gradient (the gradients left in .grad are cleared first)",
            hint="The step used more than this batch's gradient: what was already in .grad before backward?"),
        "optimizer-step-direct": Requirement(
            "the optimizer steps through the scaler, which skips steps whose gradients are not finite",
            hint="Which call steps the optimizer only when the gradients are finite?"),
        "missing-update": Requirement("the scaler updates its scale after each step",
                                      hint="After an inf gradient the scale must shrink: which scaler call adapts it?"),
        "missing-unscale": Requirement(
            "gradients are unscaled before clipping", hint="Clipping needs the true gradients: which scaler call "
            "divides the scale out of them before clip_grad_norm_?"),
        "scaler-order": Requirement(
            "scale, unscale_, step and update, each once, in that order",
            hint="Compare the scaler calls the message lists with the order a scaled step needs."),
        "not-clipped": Requirement("the gradients are clipped to max_norm",
                                   hint="The step used gradients longer than max_norm: which call bounds their norm?"),
        "clipped-by-value": Requirement(
            "the gradient clipping bounds the gradients' norm to max_norm, not each element",
            hint="Each element is below max_norm, yet the norm is not: which clipping function scales the whole "
            "gradient?"),
        "clip-before-unscale": Requirement(
            "clipping sees the unscaled gradients",
            hint="At the moment of clipping, were the gradients still multiplied by the scale?"),
        "wrong-loss": Requirement("returns the loss as a detached tensor",
                                  hint="What does amp_step return: a tensor, a number, or nothing?"),
        "wrong-value": Requirement("the returned loss is the batch's unscaled loss",
                                   hint="Which loss does amp_step return: loss_fn's, or the scaled one?"),
    },
)

_judge_drill(
    "11-epoch-metrics",
    solution="total_loss += loss_fn(out, y) * len(y); correct += (out.argmax(1) == y).sum(); "
    "return (total_loss / count).item(), (correct / count).item()",
    requires={
        "wrong-value": Requirement(
            "returns the same numbers: the mean loss and accuracy over all samples of the epoch",
            hint="The numbers changed: is each batch weighted by its size, and are both returned as numbers?"),
        "sync-per-step": Requirement(
            "at most two host syncs per epoch, whatever the number of batches",
            hint="Count the calls that bring a value to Python inside the loop (.item(), float(), int(), print)."),
    },
)

_judge_drill(
    "11-exact-resume",
    solution='torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), '
    '"scheduler": scheduler.state_dict(), "epoch": epoch, "rng": torch.get_rng_state()}, path)',
    requires={
        "not-weights-only-loadable": Requirement(
            "the checkpoint loads with weights_only=True (state dicts, tensors, plain values)",
            hint="torch.load(weights_only=True) refuses pickled objects: what did you save that is not a state_dict?"),
        "unsafe-load": Requirement(
            "the checkpoint is loaded with weights_only=True",
            hint="Your loader accepts a file holding an arbitrary object: which torch.load argument refuses those?"),
        "wrong-epoch": Requirement("load_checkpoint returns the saved epoch",
                                   hint="What does load_checkpoint return, and was the epoch saved at all?"),
        "weights-not-restored": Requirement("the model's weights are restored",
                                            hint="Right after loading, does the model hold the saved weights?"),
        "missing-optimizer-state": Requirement(
            "the optimizer's state is restored",
            hint="Adam's moments and step count change every step: are they saved?"),
        "missing-scheduler-state": Requirement(
            "the scheduler's state is restored", hint="The resumed run's learning rate starts over: what holds it?"),
        "missing-rng-state": Requirement(
            "the global RNG state is restored", hint="The resumed run draws other data: what decides the next draws?"),
    },
)
