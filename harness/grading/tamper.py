"""The in-kernel guard against submissions that monkeypatch the checks, torch or builtins to pass.

The grader injects two kinds of cells into the notebook it executes (never into what students see): one
before any student code calls `install`, which snapshots the functions and classes a probe depends on
(builtins, `harness.checks` and the lesson's check module, torch's comparison functions and Tensor, numpy,
math, the IPython shell's traceback display) and hands checking over to the judge; one before every probe
cell calls `verify`, which restores anything replaced since the snapshot, rebinds the notebook's
`check`/`hint`/`CheckFailed` names, and displays what it found (a `GUARD_MIME` bundle) for the grader. So
the probes run on honest machinery as far as the guard can tell, and the submission is flagged for review
with the names it replaced.

This is not what makes grades trustworthy: code running in the kernel can defeat anything else running
there. Points are decided by the judge outside the kernel, from data only (`harness.judge`); the guard
only flags (a guard cell that fails, or a missing heartbeat, flags the submission too).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

GUARD_MIME = "application/vnd.harness.guard+json"

_MODULES = ("builtins", "math", "harness.checks", "harness.checks.core", "harness.contract.protocol",
            "harness.contract.registry", "harness.contract.wire", "torch", "torch.testing",
            "torch.nn.functional", "numpy", "numpy.testing")
_SHELL_METHODS = ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
                  "run_ast_nodes", "run_code")
_NOTEBOOK_NAMES = ("check", "hint", "CheckFailed")
# What changes how later cells run or what they display: IPython's transformer lists and its display hooks.
_SHELL_LISTS = ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")
_SHELL_HOOKS = ("displayhook", "display_pub", "display_trap")
_MISSING = object()
_state: dict[str, Any] = {}


# Replaced on purpose by the machinery itself: ipykernel rebinds input() for every execute request.
_REBOUND_BY_KERNEL = {("builtins", "input")}


def _is_code(value: object) -> bool:
    """Functions and classes are what a cheat replaces; data attributes legitimately change."""
    return callable(value)


def _replaced(module: str, key: str, original: object, current: object) -> bool:
    """Whether `current` replaced `original`; a wrapper of it (torch._dynamo wraps torch.manual_seed on
    import, with functools.wraps) and what the kernel rebinds itself do not count."""
    if current is original or (module, key) in _REBOUND_BY_KERNEL:
        return False
    return getattr(current, "__wrapped__", None) is not original


def install(lesson_module: str | None) -> None:
    """Snapshot what the checks rely on and leave checking to the judge; call before any student code runs.

    Args:
        lesson_module: the lesson's checks module (e.g. "harness.checks.lesson00"), imported now so that its
            registered checks are part of the snapshot.
    """
    import harness.checks as checks
    from harness.contract.registry import registered

    checks.core.graded_outside = True

    if lesson_module:
        importlib.import_module(lesson_module)
    modules = {name: importlib.import_module(name) for name in _MODULES + ((lesson_module,) if lesson_module else ())}
    import torch

    classes = {"torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
               "harness.checks.CheckFailed": checks.CheckFailed}
    from IPython.display import display

    _state.update(
        display=display,  # kept before student code can replace it
        modules=modules,
        module_snapshots={name: dict(vars(m)) for name, m in modules.items()},
        classes=classes,
        class_snapshots={name: dict(vars(c)) for name, c in classes.items()},
        registry=registered(),
        names={name: getattr(checks, name) for name in _NOTEBOOK_NAMES},
        shell_class=_shell_methods_of_class(),
        shell_instance=_shell_methods_of_instance(),
        shell_lists={name: list(getattr(_shell(), name, [])) for name in _SHELL_LISTS} if _shell() else {},
        shell_hooks={name: getattr(_shell(), name, None) for name in _SHELL_HOOKS} if _shell() else {},
        sys_hooks={"displayhook": sys.displayhook},
    )


def _shell_methods_of_class() -> dict[str, Any]:
    """The IPython shell's traceback and run methods as its class defines them (empty outside IPython)."""
    shell = _shell()
    return {} if shell is None else {name: getattr(type(shell), name, None) for name in _SHELL_METHODS}


def _shell_methods_of_instance() -> dict[str, Any]:
    """Per-instance overrides the shell already has before student code (ipykernel sets some)."""
    shell = _shell()
    return {} if shell is None else {name: vars(shell)[name] for name in _SHELL_METHODS if name in vars(shell)}


def _shell() -> Any:
    """The running IPython shell, or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _restore_modules(found: list[str]) -> None:
    """Put back replaced or deleted functions of the watched modules, and the modules in sys.modules."""
    for name, module in _state["modules"].items():
        if sys.modules.get(name) is not module:
            found.append(f"sys.modules[{name!r}] was replaced")
            sys.modules[name] = module
        current = vars(module)
        for key, original in _state["module_snapshots"][name].items():
            if _is_code(original) and _replaced(name, key, original, current.get(key, _MISSING)):
                found.append(f"{name}.{key} was replaced")
                setattr(module, key, original)


# Written by copyreg whenever an instance is pickled or copied (torch.save, deepcopy, DataLoader workers).
_CACHED_BY_PYTHON = {"__slotnames__"}


def _restore_classes(found: list[str]) -> None:
    """Put back the watched classes' attributes, and remove attributes added to them."""
    for name, cls in _state["classes"].items():
        snapshot = _state["class_snapshots"][name]
        current = dict(vars(cls))
        for key, original in snapshot.items():
            if current.get(key, _MISSING) is not original:
                found.append(f"{name}.{key} was replaced")
                setattr(cls, key, original)
        for key in current.keys() - snapshot.keys() - _CACHED_BY_PYTHON:
            found.append(f"{name}.{key} was added")
            delattr(cls, key)


def _restore_checks(namespace: dict[str, Any], found: list[str]) -> None:
    """Put back the registered checks and the notebook's names for check, hint and CheckFailed."""
    from harness.contract import registry

    for task, entry in _state["registry"].items():
        if registry._REGISTRY.get(task) is not entry:
            found.append(f"the registered check of {task} was replaced")
            registry._REGISTRY[task] = entry
    for name, original in _state["names"].items():
        if name in namespace and namespace[name] is not original:
            found.append(f"the notebook's {name!r} was rebound")
            namespace[name] = original


def _restore_shell(found: list[str]) -> None:
    """Remove per-instance overrides of the shell's traceback and run methods."""
    shell = _shell()
    if shell is None:
        return
    baseline = _state["shell_instance"]
    for name in _SHELL_METHODS:
        current = vars(shell).get(name, _MISSING)
        if current is not baseline.get(name, _MISSING):
            found.append(f"IPython's {name} was replaced")
            if name in baseline:
                setattr(shell, name, baseline[name])
            else:
                delattr(shell, name)
    for name, original in _state["shell_class"].items():
        if getattr(type(shell), name, None) is not original:
            found.append(f"IPython's {type(shell).__name__}.{name} was replaced")
            setattr(type(shell), name, original)
    for name, original in _state["shell_lists"].items():
        current = getattr(shell, name, [])
        if len(current) != len(original) or any(a is not b for a, b in zip(current, original, strict=True)):
            found.append(f"IPython's {name} were changed (code that rewrites later cells)")
            current[:] = original
    for name, original in _state["shell_hooks"].items():
        if getattr(shell, name, None) is not original:
            found.append(f"IPython's {name} was replaced")
            setattr(shell, name, original)
    for name, original in _state["sys_hooks"].items():
        if getattr(sys, name) is not original:
            found.append(f"sys.{name} was replaced")
            setattr(sys, name, original)


def verify(namespace: dict[str, Any], task: str, nonce: str) -> list[str]:
    """Restore everything replaced since `install` and report it; call right before `task`'s test cell.

    Returns the list of findings (empty for a clean submission); they are also displayed as a
    `GUARD_MIME` bundle with `nonce`, the heartbeat the grader expects from every guard cell.
    """
    found: list[str] = []
    _restore_modules(found)
    _restore_classes(found)
    _restore_checks(namespace, found)
    _restore_shell(found)
    _state["display"]({GUARD_MIME: {"task": task, "nonce": nonce, "found": sorted(set(found))}}, raw=True)
    return found


def install_source(lesson_module: str | None) -> str:
    """The code of the injected cell that installs the guard."""
    return f"import harness.grading.tamper\nharness.grading.tamper.install({lesson_module!r})"


def verify_source(task: str, nonce: str) -> str:
    """The code of the injected cell that runs before `task`'s test cell."""
    return f"import harness.grading.tamper\nharness.grading.tamper.verify(globals(), {task!r}, {nonce!r});"

