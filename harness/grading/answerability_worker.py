"""The audit's worker: inside a student tree, try each shipped function, class, drill answer and text as one lesson's
answers.

`harness.grading.answerability` starts one per lesson (`python -c`, with the tree first on `sys.path` and the
instructor's editable install hidden), hands it the lesson's exercises as JSON and reads back one JSON line per
candidate tried: whether the visible check passed and, where it did, the probe's observation of a hidden case, which
the instructor's judge decides outside the tree. The worker imports only the standard library and the tree's own
`harness`: what it finds is what a student holding the tree finds. Shapes (`Shape`) are read from source, so a
candidate whose kind or arity cannot fill an exercise's slot is never imported or called.

Wrappers (`wrappers`): a shipped function also answers through a one-line wrapper, its arguments rearranged, a
factory called with some of the exercise's arguments and its function with the rest, or a scheduler it builds on an
optimizer and read at the step an argument counts (which of these a function allows is read from its source,
`wrappings`). Each such wrapper is screened on the solution's own values (`same`, on its first recorded calls) before
its check runs, so only the wrappers that compute what the solution computes cost a check.

Texts (`snippets`): every code snippet the tree ships outside its modules' functions (markdown code blocks and inline
code, the notebooks' given code cells, drill prompts, starters and hints, the probe tables' hints, released solution
lines) is tried as the exercise's solution cell, after the notebook's imports and the answers above it (and, where
the check needs them, the given cells above it): the object it defines under the exercise's name, the one function or
class of the slot's kind it defines under another (a rename), or a single expression or `return` line, or a block of
statements that ends in one, as the body of the exercise's signature (the release's stub).
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import copy
import functools
import io
import itertools
import json
import linecache
import math
import operator
import os
import re
import signal
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANY = 10_000  # a positional capacity with *args
PASSED = b"passed"  # what a candidate's child writes when its check returned


@dataclass(frozen=True)
class Shape:
    """How an object can be called, as its source declares it: a function's parameters, a class's constructor's
    (a dataclass's fields; a class with neither is taken to accept anything)."""

    kind: str  # "function" or "class"
    required: int = 0  # positional parameters without a default
    positional: int = ANY  # positional parameters in all (ANY with *args)
    names: frozenset[str] = field(default_factory=frozenset)  # parameters that can be passed by keyword
    required_keywords: frozenset[str] = frozenset()  # keyword-only parameters without a default
    any_keywords: bool = True  # **kwargs, or a constructor the source does not show

    def fits(self, slot: Shape) -> bool:
        """Whether an object of this shape can be called wherever the exercise calls an object of `slot`'s shape."""
        passed = slot.positional + len(slot.required_keywords)  # the most arguments a call of the slot may pass
        return (self.kind == slot.kind and self.required <= passed and self.positional >= slot.required
                and self.required_keywords <= slot.names
                and (self.any_keywords or slot.required_keywords <= self.names))


def _of_arguments(kind: str, arguments: ast.arguments, drop_first: bool) -> Shape:
    positional = [*arguments.posonlyargs, *arguments.args][1 if drop_first else 0:]
    defaults = len(arguments.defaults)
    keyword_only = {a.arg for a in arguments.kwonlyargs}
    required_keywords = {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is None}
    return Shape(kind, required=max(len(positional) - defaults, 0),
                 positional=ANY if arguments.vararg else len(positional),
                 names=frozenset({a.arg for a in positional} | keyword_only),
                 required_keywords=frozenset(required_keywords), any_keywords=arguments.kwarg is not None)


def shape_of(node: ast.AST) -> Shape | None:
    """The shape of a top-level `def` or `class`, None for anything else."""
    if isinstance(node, ast.FunctionDef):
        return _of_arguments("function", node.args, drop_first=False)
    if not isinstance(node, ast.ClassDef):
        return None
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return _of_arguments("class", item.args, drop_first=True)
    decorated = {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}
    bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
    if "dataclass" in decorated or "NamedTuple" in bases:
        fields = [i for i in node.body if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)
                  and "ClassVar" not in ast.unparse(i.annotation)]
        names = [f.target.id for f in fields]  # type: ignore[union-attr]
        required = sum(f.value is None for f in fields)
        return Shape("class", required=required, positional=len(names), names=frozenset(names), any_keywords=False)
    return Shape("class")


def wrappings(node: ast.FunctionDef) -> frozenset[str]:
    """How a top-level function may answer through a one-line wrapper, as its source shows: "factory" when it returns
    a function (a nested `def`, a lambda, a `partial`, or a `Callable` return annotation), "scheduler" when its first
    parameter takes an optimizer (named or annotated so)."""
    found = set()
    nested = {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node}
    for returned in (n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None):
        if (isinstance(returned, ast.Lambda) or (isinstance(returned, ast.Name) and returned.id in nested)
                or (isinstance(returned, ast.Call) and ast.unparse(returned.func).split(".")[-1] == "partial")):
            found.add("factory")
    if node.returns is not None and "Callable" in ast.unparse(node.returns):
        found.add("factory")
    positional = [*node.args.posonlyargs, *node.args.args]
    if positional and ("optim" in positional[0].arg.lower() or (
            positional[0].annotation is not None and "Optimizer" in ast.unparse(positional[0].annotation))):
        found.add("scheduler")
    return frozenset(found)


def shapes(source: str) -> dict[str, Shape]:
    """Name -> shape of each top-level function and class `source` defines (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {node.name: shape for node in tree.body if (shape := shape_of(node)) is not None}  # type: ignore[attr-defined]


def _in_child(action: Callable[[int], None], seconds: float) -> tuple[bytes, bool]:
    """What `action(fd)` writes to `fd` in a forked child, and whether the child ended within `seconds`.

    The child is its own session, so whatever a candidate does (signal handlers, global settings, exits, processes
    of its own) ends with it. Only what the action writes counts: a candidate's own exit says nothing.
    """
    verdict, told = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(verdict)
            os.setsid()
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            action(told)
        finally:
            os._exit(0)
    os.close(told)
    os.set_blocking(verdict, False)  # a process the candidate started may still hold the pipe open
    deadline, finished, said = time.monotonic() + seconds, False, b""
    while not finished and time.monotonic() < deadline:
        finished = os.waitpid(child, os.WNOHANG)[0] != 0
        with contextlib.suppress(BlockingIOError):
            said += os.read(verdict, 65536)
        if not finished:
            time.sleep(0.002)
    _end_session(child)
    if not finished:
        os.waitpid(child, 0)
    with contextlib.suppress(BlockingIOError):
        said += os.read(verdict, 65536)
    os.close(verdict)
    return said, finished


# What check() receives, made in the audit's child (a value answer's given code trains there, within the bound)
Arguments = Callable[[], tuple[Any, ...]]


def _checked(task: str, arguments: Arguments, fd: int) -> None:
    """Run the visible check of `task` on `arguments()` (in the audit's child); write PASSED to `fd` if it passes."""
    from harness.checks import check

    check(task, *arguments())
    os.write(fd, PASSED)


def _passes(task: str, arguments: Arguments, seconds: float) -> bool | None:
    """Whether the visible check of `task` passes on `arguments()` in a child (None: it ran past `seconds`)."""
    said, finished = _in_child(functools.partial(_checked, task, arguments), seconds)
    return said == PASSED if finished else None


def _probed(task: str, arguments: Arguments, seed: int, fd: int) -> None:
    """Write the observation of `task`'s probe on `arguments()`, on the hidden case of offset `seed`, to `fd` (in the
    audit's child): as graded, the probe runs beside the candidate and the grader's judge decides."""
    from harness.contract.case import Case
    from harness.contract.protocol import observe

    os.write(fd, observe(task, arguments(), Case(hidden=True, seed=seed)))


def hidden_observation(task: str, arguments: Arguments, seed: int, seconds: float) -> str | None:
    """The hidden case's observation of `arguments()` as base64 text, for the instructor's judge (None: the probe
    ran past `seconds`)."""
    said, finished = _in_child(functools.partial(_probed, task, arguments, seed), seconds)
    return base64.b64encode(said).decode() if finished else None


def outline(value: Any) -> Any:
    """What a screen compares of a returned value: its type, a tensor's shape and dtype, a container's outline."""
    import torch

    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() <= 1:
        return "number"  # a check may accept a one-element tensor where the solution returns a number
    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape), str(value.dtype)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [outline(item) for item in value]]
    if isinstance(value, dict):
        return ["dict", sorted(map(str, value)), [outline(value[key]) for key in value]]
    if isinstance(value, (bool, int, float)):
        return "number"
    return type(value).__name__ if isinstance(value, (str, bytes, type(None))) else "object"


class Recorder:
    """Wraps the solution's function: keeps a copy of the arguments of its first calls and what they returned (the
    first call's outline, or ("raised", the type's name) when it raised)."""

    KEPT = 3  # calls whose values a wrapper's screen compares

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.first: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.returned: Any = None
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any], Any]] = []  # copies: arguments and value

    def wrap(self) -> Callable[..., Any]:
        """A function with the solution's signature that records its first calls."""

        @functools.wraps(self.function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if self.first is not None and len(self.calls) >= self.KEPT:
                return self.function(*args, **kwargs)
            try:
                copied = copy.deepcopy((args, kwargs))
            except Exception:  # noqa: BLE001 - arguments that cannot be copied leave the screen off
                copied = None
            try:
                value = self.function(*args, **kwargs)
            except BaseException as error:  # a first call that raises is recorded as what it raised
                if copied is not None and self.first is None:
                    self.first, self.returned = copied, ("raised", type(error).__name__)
                raise
            if copied is not None and self.first is None:
                self.first, self.returned = copied, outline(value)
            if self.first is not None and len(self.calls) < self.KEPT:
                try:
                    self.calls.append((*copied, copy.deepcopy(value)))  # type: ignore[misc]
                except Exception:  # noqa: BLE001 - a call that cannot be copied cannot be compared
                    self.calls.append(((), {}, _UNCOMPARABLE))
            return value

        return recorded


_UNCOMPARABLE = object()


def same(value: Any, recorded: Any) -> bool:
    """Whether `value` equals the solution's `recorded` value: numbers and tensors within float rounding (NaN equals
    nothing), containers item by item, strings, bytes and None exactly; any other object never (it cannot be
    compared, so a wrapper's screen drops it)."""
    import torch

    if isinstance(recorded, torch.Tensor) or isinstance(value, torch.Tensor):
        if not (isinstance(value, (torch.Tensor, int, float)) and isinstance(recorded, (torch.Tensor, int, float))):
            return False
        got, want = torch.as_tensor(value).detach().double().cpu(), torch.as_tensor(recorded).detach().double().cpu()
        return got.shape == want.shape and bool(torch.allclose(got, want, rtol=1e-6, atol=1e-9))
    if isinstance(recorded, (bool, int, float)) and isinstance(value, (bool, int, float)):
        return math.isclose(value, recorded, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(recorded, (list, tuple)) and isinstance(value, (list, tuple)):
        return len(value) == len(recorded) and all(same(v, r) for v, r in zip(value, recorded, strict=True))
    if isinstance(recorded, dict) and isinstance(value, dict):
        return value.keys() == recorded.keys() and all(same(value[k], recorded[k]) for k in recorded)
    return isinstance(recorded, (str, bytes, type(None))) and type(value) is type(recorded) and value == recorded


def comparable(value: Any) -> bool:
    """Whether `same` can tell `value` from others: a number, tensor, string, bytes or None, or containers of them."""
    if isinstance(value, (list, tuple)):
        return all(comparable(item) for item in value)
    if isinstance(value, dict):
        return all(comparable(item) for item in value.values())
    return value is not _UNCOMPARABLE and outline(value) != "object"


class _TimedOut(BaseException):
    """A screened candidate ran past its bound (a BaseException: a candidate's own handlers do not catch it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _TimedOut


def _outcome(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a call does, as the screen compares it: the outline of what it returns, or ("raised", the type's name)."""
    try:
        return outline(function(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
    except _TimedOut:
        raise
    except BaseException as error:  # noqa: BLE001 - compared with what the solution raises on the same call
        return ("raised", type(error).__name__)


def _screen_batch(candidates: list[Callable[..., Any]], recorder: Recorder, seconds: int, strict: bool,
                  fd: int) -> None:
    """Call each candidate as the solution was first called (`strict`: as it was called each recorded time), in one
    child; write "index passed" lines to `fd`.

    Not strict, a candidate passes when it does what the solution did: returns what has the outline of its first
    value, or raises the same type of error. A first call that returned None or raised depends on what was around
    it (side effects, which an outline cannot see; files that went with the check's temporary folder): the solution
    is called again here the same way, and the candidate must do what it does now (past its bound, what it did)."""
    calls = recorder.calls if strict else [(*recorder.first, None)]  # type: ignore[misc]
    reference = recorder.returned
    if not strict and (reference == outline(None) or isinstance(reference, tuple)):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(seconds)
        with contextlib.suppress(BaseException):  # a replay past its bound leaves the first value as the reference
            reference = _outcome(recorder.function, *recorder.first)  # type: ignore[misc]
        signal.alarm(0)
    for index, candidate in enumerate(candidates):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(seconds)
        try:
            passed = (all(same(candidate(*copy.deepcopy(args), **copy.deepcopy(kwargs)), value)
                          for args, kwargs, value in calls) if strict
                      else _outcome(candidate, *recorder.first) == reference)  # type: ignore[misc]
        except BaseException:  # noqa: BLE001 - a candidate that exits or runs past its bound is screened out
            passed = False
        finally:
            signal.alarm(0)
        os.write(fd, f"{index} {int(passed)}\n".encode())


def screen(candidates: list[Callable[..., Any]], recorder: Recorder, seconds: int, strict: bool = False) -> list[bool]:
    """Which candidates return what has the outline of the solution's first call (`strict`: what equals the solution's
    value on each recorded call), in children that each screen a batch; a candidate that ends its child or runs past
    `seconds` is screened out and the rest go to a new child.

    Candidates of one batch share a child: one whose side effects break the next can make the screen drop that
    one; each candidate the screen keeps has its check run in a child of its own.
    """
    passed: list[bool] = []
    while len(passed) < len(candidates):
        rest = candidates[len(passed):]
        said, _ = _in_child(functools.partial(_screen_batch, rest, recorder, seconds, strict),
                            seconds * len(rest) + 5)
        lines = [line.split() for line in said.decode().splitlines() if line.count(" ") == 1]
        passed += [flag == "1" for _, flag in lines]
        if len(lines) < len(rest):
            passed.append(False)  # the candidate that ended or stalled its child
    return passed


def _end_session(child: int) -> None:
    """Kill what is left of a candidate's session (the child, and any process it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child, signal.SIGKILL)


def _module_candidates(tree: Path) -> list[tuple[str, str, str, Shape, frozenset[str]]]:
    """(module, name, file, shape, `wrappings`) of every top-level function and class in the tree's harness package."""
    found = []
    for path in sorted((tree / "harness").rglob("*.py")):
        relative = path.relative_to(tree)
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        if module.endswith("__main__"):
            continue
        try:
            nodes = ast.parse(path.read_text(encoding="utf-8")).body
        except SyntaxError:
            continue
        found += [(module, node.name, str(relative), shape,  # type: ignore[attr-defined]
                   wrappings(node) if isinstance(node, ast.FunctionDef) else frozenset())
                  for node in nodes if (shape := shape_of(node)) is not None]
    return found


@dataclass(frozen=True)
class Wrapping:
    """A one-line wrapper around a shipped function, in terms of the exercise's positional arguments (by index):
    "rearranged" calls it with `first`; "curried" calls it with `first`, then what it returns with `then`;
    "scheduler" builds it on an optimizer of lr 1 with `first` and reads the lr at step `then[0]` (`read`:
    "lambda", LambdaLR's factor; "stepped", after stepping it that many times)."""

    kind: str
    first: tuple[int, ...]
    then: tuple[int, ...] = ()
    read: str = ""

    def describe(self) -> str:
        """The wrapper as a line, the exercise's arguments named a, b, c... in their order."""
        names = [chr(ord("a") + i) for i in range(26)]
        first, then = ", ".join(names[i] for i in self.first), ", ".join(names[i] for i in self.then)
        if self.kind == "rearranged":
            return f"f({first})"
        if self.kind == "curried":
            return f"f({first})({then})"
        built = f"f(optimizer, {first})" if first else "f(optimizer)"
        return f"{built}.lr_lambdas[0]({then})" if self.read == "lambda" else f"lr of {built} stepped {then} times"


def _call_wrapped(target: Callable[..., Any], wrapping: Wrapping, args: tuple[Any, ...]) -> Any:
    """What the wrapper `wrapping` of `target` returns on the exercise's positional arguments `args`."""
    chosen = [args[i] for i in wrapping.first]
    if wrapping.kind == "rearranged":
        return target(*chosen)
    if wrapping.kind == "curried":
        return target(*chosen)(*(args[i] for i in wrapping.then))
    import warnings

    import torch

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = target(optimizer, *chosen)
    step = args[wrapping.then[0]]
    if wrapping.read == "lambda":
        return scheduler.lr_lambdas[0](step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stepping the scheduler without optimizer steps
        for _ in range(operator.index(step)):
            scheduler.step()
    return optimizer.param_groups[0]["lr"]


def _wrapped(module: str, name: str, wrapping: Wrapping) -> Callable[..., Any] | None:
    """`module.name` from the tree behind `wrapping` (None where it does not import or is not callable)."""
    target = _imported(module, name)
    if not callable(target):
        return None

    def wrapped(*args: Any) -> Any:
        return _call_wrapped(target, wrapping, args)

    return wrapped


def wrappers(arity: int, shape: Shape, kinds: frozenset[str]) -> list[Wrapping]:
    """The one-line wrappers that can make a function of `shape` (and `wrappings` `kinds`) take an exercise's `arity`
    positional arguments: its arguments rearranged (up to 4), a factory called with some of them and its function
    with the rest, a scheduler built with all but one and read at the step the remaining one counts."""
    takes = lambda count: shape.kind == "function" and shape.required <= count <= shape.positional  # noqa: E731
    found = []
    if arity <= 4 and takes(arity):
        found += [Wrapping("rearranged", order) for order in itertools.permutations(range(arity))
                  if order != tuple(range(arity))]
    if "factory" in kinds:
        found += [Wrapping("curried", first, tuple(i for i in range(arity) if i not in first))
                  for count in range(arity) if takes(count) for first in itertools.permutations(range(arity), count)]
    if "scheduler" in kinds and takes(arity):
        found += [Wrapping("scheduler", first, (step,), read) for step in range(arity)
                  for first in itertools.permutations([i for i in range(arity) if i != step])
                  for read in ("lambda", "stepped")]
    return found


def _wrapped_tries(slot: str, recorder: Recorder,
                   modules: list[tuple[str, str, str, Shape, frozenset[str]]]) -> list[tuple[str, str, str, Any]]:
    """(label, file, slot, wrapped candidate) for each one-line wrapper of a shipped function that could fill `slot`:
    only where the solution's recorded calls are positional and their values comparable (`same`), which the strict
    screen then requires of each wrapper; a scheduler wrapper only where the step is an int."""
    if recorder.first is None or recorder.first[1] or not recorder.calls or any(
            kwargs or not comparable(value) for _, kwargs, value in recorder.calls):
        return []
    arity = len(recorder.first[0])
    found = []
    for module, name, file, shape, kinds in modules:
        for wrapping in wrappers(arity, shape, kinds):
            if wrapping.kind == "scheduler" and type(recorder.first[0][wrapping.then[0]]) is not int:
                continue
            if (candidate := _wrapped(module, name, wrapping)) is not None:
                found.append((f"{module}.{name} (wrapped: {wrapping.describe()})", file, slot, candidate))
    return found


def _drill_answers(tree: Path) -> list[tuple[str, str, str, str]]:
    """(drill id, entry name, file, source) of every drill answer the tree holds: answers.json's, else the one its
    judge module carries (the answer side joined by the drill bank)."""
    from harness.drills.core import all_drills

    answers_file = tree / "harness" / "judges" / "drills" / "answers.json"
    shipped = json.loads(answers_file.read_text()) if answers_file.is_file() else {}
    judge_files = {path: path.read_text(encoding="utf-8")
                   for path in sorted((tree / "harness" / "judges" / "drills").glob("*.py"))}
    found = []
    for drill in all_drills():
        if drill.id in shipped and shipped[drill.id].get("solution"):
            found.append((drill.id, drill.entry, str(answers_file.relative_to(tree)), shipped[drill.id]["solution"]))
        elif drill.solution:
            where = next((p for p, text in judge_files.items() if f'drill_id="{drill.id}"' in text),
                         answers_file.parent)
            found.append((drill.id, drill.entry, str(where.relative_to(tree)), drill.solution))
    return found


@dataclass(frozen=True)
class Snippet:
    """A piece of code a text of the tree shows: where (`label`: `text <file>:<line>` or `text <file> <key>`)."""

    label: str
    file: str
    code: str


_FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]+)`")
# Calls in the probe and judge tables whose string arguments are hints a student can show
_HINT_CALLS = {"Hints", "Requirement", "fail"}


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def fragments(text: str) -> list[tuple[int, str]]:
    """(line, code) of every piece of code `text` may show: its fenced and indented blocks, its inline code, and the
    whole text (a hint may be a code line)."""
    found = [(_line(text, m.start()) + 1, textwrap.dedent(m.group(1))) for m in _FENCE.finditer(text)]
    outside = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    block: list[str] = []
    start = 0
    for number, line in enumerate([*outside.splitlines(), ""], 1):
        if line.startswith(("    ", "\t")) or (block and not line.strip()):
            start = start if block else number
            block.append(line)
        elif block:
            found.append((start, textwrap.dedent("\n".join(block))))
            block = []
    found += [(_line(outside, m.start()), m.group(1)) for m in _INLINE.finditer(outside)]
    return [*found, (1, text)]


def _json_texts(value: Any, key: str) -> list[tuple[str, str]]:
    """(key path, string) of every string in a JSON value (a list item named by its "id" where it has one)."""
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in _json_texts(v, f"{key}.{k}".lstrip("."))]
    if isinstance(value, list):
        return [found for i, v in enumerate(value)
                for found in _json_texts(v, f"{key}.{v.get('id', i) if isinstance(v, dict) else i}".lstrip("."))]
    return []


def _hint_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string argument of a `Hints`, `Requirement` or `fail` call, and every `hint=` string."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func).split(".")[-1]
        values = [*node.args, *(k.value for k in node.keywords)] if called in _HINT_CALLS else [
            k.value for k in node.keywords if k.arg == "hint"]
        found += [(v.lineno, v.value) for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return found


def _notebook_texts(path: Path) -> list[tuple[int, str]]:
    """(cell number, code) of a notebook's markdown cells' code and its given code cells (not its solution cells)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return []
    found = []
    for number, cell in enumerate(cells, 1):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            found += [(number, code) for _, code in fragments(source)]
        elif cell.get("cell_type") == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            found.append((number, source))
    return found


def snippets(tree: Path) -> list[Snippet]:
    """Every snippet of code the tree's texts show (each text once: the first place that shows it)."""
    found: list[Snippet] = []
    for path in sorted(tree.rglob("*")):
        file = str(path.relative_to(tree))
        if path.suffix == ".md":
            found += [Snippet(f"text {file}:{n}", file, c) for n, c in fragments(path.read_text(encoding="utf-8"))]
        elif path.suffix == ".ipynb":
            found += [Snippet(f"text {file} cell {n}", file, c) for n, c in _notebook_texts(path)]
        elif path.suffix == ".py" and file.startswith("harness"):
            found += [Snippet(f"text {file}:{n}", file, c) for n, text in _hint_strings(path.read_text("utf-8"))
                      for _, c in fragments(text)]
    for file in ("harness/drills/index.json", "harness/checks/released_hints.json"):
        with contextlib.suppress(OSError, ValueError):
            texts = _json_texts(json.loads((tree / file).read_text(encoding="utf-8")), "")
            found += [Snippet(f"text {file} {key}", file, c) for key, text in texts for _, c in fragments(text)]
    unique: dict[str, Snippet] = {}
    for snippet in found:
        code = textwrap.dedent("\n".join(line for line in snippet.code.splitlines()
                                         if not line.lstrip().startswith(("%", "!", ">>>")))).strip()
        if code and code not in unique and _parses(code):
            unique[code] = Snippet(snippet.label, snippet.file, code)
    return list(unique.values())


def _parses(code: str) -> bool:
    return (_body_line(code) is not None or bool(shapes(code))
            or any(_value_statements(code, kind) for kind in (dict, list, tuple, set)))


def _body_line(code: str) -> str | None:
    """A single expression or `return` line as a return statement, or a block of statements (no `def` or `class`)
    that ends in one, as a function body (None for anything else)."""
    try:
        body = ast.parse("def _():\n" + textwrap.indent(code, "    ")).body[0].body  # type: ignore[attr-defined]
    except (SyntaxError, ValueError):
        return None
    if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in body):
        return None
    *before, last = body
    if isinstance(last, ast.Return) and last.value is not None:
        returned = ast.unparse(last)
    elif isinstance(last, ast.Expr) and not isinstance(last.value, (ast.Name, ast.Constant)):
        returned = f"return {ast.unparse(last.value)}"
    else:
        return None
    return "\n".join([*(ast.unparse(n) for n in before), returned])


def _unbound(code: str, known: set[str]) -> set[str]:
    """The names `code` reads that it does not bind itself and that are not in `known` (a line that reads one raises
    NameError: the cheap screen of a body line)."""
    tree = ast.parse(code)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    return read - bound - known - set(dir(builtins))


def _definitions(code: str) -> str:
    """`code`'s imports, functions, classes and assignments that call nothing (what defines, never what runs)."""
    kept = [node for node in ast.parse(code).body
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
            or (isinstance(node, (ast.Assign, ast.AnnAssign))
                and not any(isinstance(n, ast.Call) for n in ast.walk(node)))]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def _defined(namespace: dict[str, Any], code: str, name: str, seconds: int) -> Any:
    """The object `name` that `code`'s definitions leave, run after `namespace` (the notebook's imports, or the
    cells above the exercise where its check needs them), or None."""
    return _valued(namespace, _definitions(code), name, seconds)


def _text_tries(exercise: dict[str, Any], texts: list[Snippet], namespace: dict[str, Any],
                seconds: int) -> list[tuple[str, str, str, Callable[[], Any]]]:
    """(label, file, slot, loader) for each snippet that can fill a slot of `exercise`: one defining the slot's name
    with a fitting shape, one defining exactly one object of the slot's kind that fits (renamed), or a single
    expression or return line, or a block of statements ending in one, as the body of the slot's stub signature."""
    tries = []
    for slot, fields in exercise["slots"].items():
        wanted = Shape(**{**fields, "names": frozenset(fields["names"]),
                          "required_keywords": frozenset(fields["required_keywords"])})
        stub = exercise.get("stubs", {}).get(slot)
        for snippet in texts:
            defined = shapes(snippet.code)
            of_kind = [name for name, shape in defined.items() if shape.kind == wanted.kind]
            line = _body_line(snippet.code)
            if slot in defined and defined[slot].fits(wanted):
                label, code, name = snippet.label, snippet.code, slot
            elif len(of_kind) == 1 and defined[of_kind[0]].fits(wanted):
                label, code, name = f"{snippet.label} (renamed {of_kind[0]})", snippet.code, of_kind[0]
            elif line is not None and stub is not None and not defined and not (
                    _unbound(f"{stub}\n{textwrap.indent(line, '    ')}", set(namespace))
                    - _unbound(f"{stub}\n    pass", set())):
                label, code, name = f"{snippet.label} (as the body)", f"{stub}\n{textwrap.indent(line, '    ')}", slot
            else:
                continue
            tries.append((label, snippet.file, slot, functools.partial(_defined, namespace, code, name, seconds)))
    return tries


_CELLS = itertools.count()


def _compiled(source: str) -> Any:
    """`source` compiled as a notebook cell is: under a name of its own whose lines `linecache` holds, so
    `inspect.getsource` reads what it defines (a check that re-creates a function from its source needs it)."""
    filename = f"<audit-cell-{next(_CELLS)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return compile(source, filename, "exec")


def _notebook_namespace() -> dict[str, Any]:
    import torch

    return {"__name__": "__main__", "torch": torch, "nn": torch.nn}


def _value_statements(code: str, kind: type) -> list[tuple[str, str]]:
    """(name, statement) of each top-level `name = ...` in `code` whose value is written as a `kind`: a display
    (`{...}`, `[...]`, `(...)`) or a call of the builtin (`dict(...)`); read from source, so nothing else runs."""
    displays = {dict: ast.Dict, list: ast.List, tuple: ast.Tuple, set: ast.Set}
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [(node.targets[0].id, ast.unparse(node)) for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and (isinstance(node.value, displays.get(kind, ())) or (
                isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id == kind.__name__))]


def _valued(namespace: dict[str, Any], statement: str, name: str, seconds: int) -> Any:
    """The value `statement` (code the tree's texts show) gives `name`, run after `namespace`, or None."""
    scope = dict(namespace)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(_compiled(statement), scope)  # noqa: S102 - the tree's own text
    except BaseException:  # noqa: BLE001 - a statement that does not run answers nothing
        return None
    finally:
        signal.alarm(0)
    return scope.get(name)


def _value_tries(exercise: dict[str, Any], texts: list[Snippet], namespace: dict[str, Any], base: dict[str, Any],
                 seconds: int) -> list[tuple[str, str, str, Callable[[], Any]]]:
    """(label, file, slot, loader) for each assignment a text shows that can stand for an answer that is a value
    (`CONFIG = dict(...)`): a value of the solution's type, under the slot's name or another (a rename); a dict
    shares a key with the solution's (one that shares none configures something else)."""
    tries = []
    for slot in exercise["values"]:
        wanted = base.get(slot)
        for snippet in texts:
            for name, statement in _value_statements(snippet.code, type(wanted)):
                label = snippet.label if name == slot else f"{snippet.label} (renamed {name})"
                tries.append((label, snippet.file, slot, functools.partial(_fitting_value, namespace, statement, name,
                                                                           wanted, seconds)))
    return tries


def _fitting_value(namespace: dict[str, Any], statement: str, name: str, wanted: Any, seconds: int) -> Any:
    """The value `statement` gives `name` if it can stand for `wanted` (same type; a dict sharing a key), else None."""
    value = _valued(namespace, statement, name, seconds)
    if type(value) is not type(wanted) or (isinstance(wanted, dict) and not set(value) & set(wanted)):
        return None
    return value


def _around(exercise: dict[str, Any], namespace: dict[str, Any], slot: str, value: Any) -> tuple[Any, ...]:
    """What check() receives when the solution cell's given code runs with `value` as the answer `slot`."""
    scope = {**namespace, slot: value}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(_compiled(exercise["around"]), scope)  # noqa: S102 - the course's own given code
    return _arguments(exercise, scope)


def _run_source(source: str) -> dict[str, Any] | None:
    """The namespace `source` leaves, run beside torch and nn as every notebook has them (None if it raises)."""
    namespace = _notebook_namespace()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(_compiled(source), namespace)  # noqa: S102 - the course's own answers
    except Exception:  # noqa: BLE001 - an answer that does not run standalone answers nothing
        return None
    return namespace


def _run_cells(cells: list[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The namespace the notebook's `cells` leave (run after `namespace`, or from scratch), in order as Run all runs
    them: a cell that raises is passed over."""
    namespace = _notebook_namespace() if namespace is None else namespace
    for cell in cells:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(_compiled(cell), namespace)  # noqa: S102 - the course's own given cells
        except Exception:  # noqa: BLE001 - as Run all goes on after a failing cell, when the check decides
            continue
    return namespace


def _arguments(exercise: dict[str, Any], namespace: dict[str, Any]) -> tuple[Any, ...]:
    """The objects the exercise's test cell passes to check(), evaluated in `namespace` (globals() is it)."""
    return eval(f"({exercise['arguments']},)", namespace)  # noqa: S307 - the course's own test-cell text


def _imported(module: str, name: str) -> Any:
    """`module.name` from the tree (None where the module does not import)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return getattr(__import__(module, fromlist=[name]), name)
    except Exception:  # noqa: BLE001 - a module that does not import answers nothing
        return None


def _tries(exercise: dict[str, Any], modules: list[tuple[str, str, str, Shape, frozenset[str]]],
           answers: dict[str, tuple[Any, str, str, Shape | None]]) -> list[tuple[str, str, str, Callable[[], Any]]]:
    """(label, file, slot, a loader of the candidate) for each candidate whose shape fits a slot of `exercise`."""
    tries = []
    for slot, fields in exercise["slots"].items():
        wanted = Shape(**{**fields, "names": frozenset(fields["names"]),
                          "required_keywords": frozenset(fields["required_keywords"])})
        tries += [(f"{module}.{name}", file, slot, functools.partial(_imported, module, name))
                  for module, name, file, shape, _ in modules if shape.fits(wanted)]
        tries += [(f"drill answer {drill_id}", file, slot, functools.partial(space.get, entry))
                  for drill_id, (space, entry, file, shape) in answers.items()
                  if space is not None and shape is not None and shape.fits(wanted)]
    for slot, drill_id in exercise["text_slots"].items():
        space, _, file, _ = answers.get(drill_id, (None, "", "", None))
        if space is not None and "answer" in space:
            tries.append((f"drill answer {drill_id}", file, slot, functools.partial(space.get, "answer")))
    return tries


@dataclass
class Baseline:
    """The solution in the tree: its namespace, a recorder per function slot (its first call), its check's time, the
    namespace a text candidate runs after, and how long the solution cell itself ran (where the cells above it ran
    first: a value answer's given code trains there)."""

    namespace: dict[str, Any]
    recorders: dict[str, Recorder]
    took: float
    texts_after: dict[str, Any]
    cell_s: float = 0.0


def _baseline(exercise: dict[str, Any]) -> Baseline | None:
    """The solution's baseline (None: the solution does not pass in the tree).

    The solution runs after the notebook's imports and solution cells, and a text after the imports and the answers
    above the exercise's (a student who reached it holds them); where the check needs the given cells' objects too
    (a helper the answer calls, a class it builds), both run after the cells above the solution cell, as Run all
    leaves them."""
    base = _run_source(exercise["setup"])
    if base is not None and (passed := _checked_here(exercise, base)) is not None:
        return Baseline(*passed, _run_source(exercise["imports"]) or {})
    above = _run_cells(exercise["given"])
    before = dict(above)
    started = time.monotonic()
    answered = _run_cells([exercise["solution"]], above)
    cell_s = time.monotonic() - started
    passed = _checked_here(exercise, answered)
    return None if passed is None else Baseline(*passed, before, cell_s)


def _checked_here(exercise: dict[str, Any], base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Recorder],
                                                                            float] | None:
    """`base`, a recorder per function slot and the check's time, if the exercise's check passes on the solution in
    `base` (None if it does not). A check that re-creates the solution from its source cannot take the recorders'
    wrappers: then it runs on the solution itself, with no recorder (its candidates are checked unscreened)."""
    from harness.checks import check

    recorders = {slot: Recorder(base[slot]) for slot in exercise["slots"]
                 if callable(base.get(slot)) and not isinstance(base[slot], type)}
    for kept in (recorders, {}):
        started = time.monotonic()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                check(exercise["task"], *_arguments(exercise, {**base, **{s: r.wrap() for s, r in kept.items()}}))
        except Exception:  # noqa: BLE001 - reported as unaudited
            if not kept:
                return None
            continue
        return base, kept, time.monotonic() - started
    return None


def audit_lesson(request: dict[str, Any], report: io.TextIOBase) -> None:
    """Try every candidate on each exercise of `request` and write one JSON line per result to `report`.

    A function candidate is first screened: called in a child as the solution was first called, it must return
    something of the same outline within `screen_s`; only then does the exercise's check run on it, bounded by
    a few times the solution's own check time. A value candidate (an answer such as a config) runs the solution
    cell's given code in the child, bounded by a few times the solution cell's time. A candidate the visible check
    passes is probed on the hidden case (`hidden_seed`) too, and its observation written with the result for the
    instructor's judge.
    """
    tree = Path(request["tree"])
    only, only_texts = tuple(request.get("modules", ())), tuple(request.get("texts", ()))
    narrowed = bool(only or only_texts)  # a scope that names modules or texts tries only those
    modules = [found for found in _module_candidates(tree) if not narrowed or found[0].startswith(only)]
    answers = {} if narrowed else {drill_id: (_run_source(source), entry, file, shapes(source).get(entry))
                                   for drill_id, entry, file, source in _drill_answers(tree)}
    texts = [snippet for snippet in snippets(tree) if not narrowed or snippet.file.startswith(only_texts)]

    def emit(**record: Any) -> None:
        report.write(json.dumps(record) + "\n")
        report.flush()

    for exercise in request["exercises"]:
        task = exercise["task"]
        baseline = _baseline(exercise)
        if baseline is None:
            emit(task=task, unaudited="the solution's own answer does not pass its check in the tree")
            continue
        base, recorders, imported = baseline.namespace, baseline.recorders, baseline.texts_after
        bound = min(request["per_check_s"], max(2.0, 5 * baseline.took))
        value_bound = max(bound, 3 * (baseline.cell_s + baseline.took))  # its given code runs again in the child
        loaders = [*_tries(exercise, modules, answers), *_text_tries(exercise, texts, imported, request["screen_s"]),
                   *_value_tries(exercise, texts, imported, base, request["screen_s"])]
        tries = [(label, file, slot, candidate) for label, file, slot, load in loaders
                 if (candidate := load()) is not None]
        dropped: set[int] = set()
        for slot, recorder in recorders.items():
            functions = [i for i, t in enumerate(tries) if t[2] == slot and not isinstance(t[3], type)]
            if recorder.first is not None and functions:
                kept = screen([tries[i][3] for i in functions], recorder, request["screen_s"])
                dropped |= {i for i, keep in zip(functions, kept, strict=True) if not keep}
            wrapped = _wrapped_tries(slot, recorder, modules)  # screened on the solution's values, not outlines
            kept = screen([candidate for *_, candidate in wrapped], recorder, request["screen_s"], strict=True)
            dropped |= {len(tries) + i for i, keep in enumerate(kept) if not keep}
            tries += wrapped
        for index, (label, file, slot, candidate) in enumerate(tries):
            if index in dropped:
                emit(task=task, label=label, file=file, hit=False, timed_out=False, screened=True)
                continue
            if slot in exercise["values"]:
                arguments, seconds = functools.partial(_around, exercise, imported, slot, candidate), value_bound
            else:
                arguments, seconds = functools.partial(_arguments, exercise, {**base, slot: candidate}), bound
            verdict = _passes(task, arguments, seconds)
            observed = hidden_observation(task, arguments, exercise["hidden_seed"], seconds) if verdict else None
            emit(task=task, label=label, file=file, hit=verdict is True, timed_out=verdict is None, screened=False,
                 hidden=observed)
        emit(task=task, done=len(tries))  # finished: an exercise no candidate fits is audited, not skipped


def main() -> None:
    """Read the request (JSON) from stdin; write results to the file named in argv[1]."""
    request = json.loads(sys.stdin.read())
    with tempfile.TemporaryDirectory(prefix="work-") as scratch, open(sys.argv[1], "w") as report:
        os.chdir(scratch)  # a candidate that writes files writes them here (the only writable folder: TMPDIR)
        audit_lesson(request, report)


if __name__ == "__main__":
    main()
