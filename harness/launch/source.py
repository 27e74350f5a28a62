"""Shipping a notebook function to the ranks as source: the script torchrun runs on every rank.

spawn pickles a function by reference, and a function defined in a notebook cannot be imported by the
child; so `function_script` writes `fn`'s source into a script, together with what `fn` uses: modules and
importable functions or classes as imports, literals as constants, and the notebook's own functions and
classes as their sources, in dependency order.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import linecache
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Callable


def _global_names(code: types.CodeType) -> set[str]:
    """Names a code object (and the functions and classes nested in it) reads as globals."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _is_literal(value: Any) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _importable(obj: Any) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    qualname = getattr(obj, "__qualname__", "")
    return module is not None and module.__name__ != "__main__" and "<" not in qualname and (
        getattr(module, qualname.split(".")[0], None) is not None
    )


def _check_sendable_function(fn: Any, role: str) -> None:
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{role} must be a function defined with def (got {type(fn).__name__}).")
    if fn.__name__ == "<lambda>":
        raise TypeError(
            f"{role} is a lambda: a lambda has no name for the other processes to call. "
            "Define it with `def` at the top level of a cell."
        )
    if fn.__code__.co_freevars or "<locals>" in fn.__qualname__:
        captured = ", ".join(fn.__code__.co_freevars) or "its enclosing function's scope"
        raise TypeError(
            f"{role} `{fn.__qualname__}` is defined inside another function and captures {captured}: "
            "the other processes cannot rebuild that. Define it at the top level of a cell and pass "
            "those values as arguments."
        )


def _class_source(cls: type) -> str:
    """A class's source, found through its methods' file: inspect cannot locate classes defined in a
    notebook cell (it searches the file of the class's module, and a notebook's __main__ has none)."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        pass
    files = {member.__code__.co_filename for member in vars(cls).values() if inspect.isfunction(member)}
    for filename in files:
        source = "".join(linecache.getlines(filename))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                return ast.get_source_segment(source, node, padded=True) or ""
    raise OSError(f"no method of class {cls.__name__} points to its source")


class _ScriptBuilder:
    """Collects the imports, constants and sources a function needs, in dependency order."""

    def __init__(self) -> None:
        self.imports: list[str] = []
        self.constants: list[str] = []
        self.sources: list[str] = []
        self.done: set[str] = set()

    def add_object(self, name: str, obj: Any, user: str) -> None:
        if name in self.done:
            return
        self.done.add(name)
        if isinstance(obj, types.ModuleType):
            self.imports.append(
                f"import {obj.__name__}" if obj.__name__ == name else f"import {obj.__name__} as {name}"
            )
        elif (inspect.isfunction(obj) or inspect.isclass(obj)) and _importable(obj):
            self.imports.append(f"from {obj.__module__} import {obj.__qualname__} as {name}")
        elif inspect.isfunction(obj) or inspect.isclass(obj):
            self.add_source(name, obj)
        elif _is_literal(obj):
            self.constants.append(f"{name} = {obj!r}")
        else:
            raise TypeError(
                f"`{user}` uses the global `{name}` (a {type(obj).__name__}), which cannot be sent to the "
                f"other processes. Create it inside `{user}`, or pass it as an argument (tensors, numbers, "
                "strings, lists and dicts of these travel)."
            )

    def add_source(self, name: str, obj: Any) -> None:
        if inspect.isfunction(obj):
            _check_sendable_function(obj, f"`{name}`")
        try:
            source = textwrap.dedent(inspect.getsource(obj) if inspect.isfunction(obj) else _class_source(obj))
        except (OSError, TypeError) as error:
            raise TypeError(
                f"the source of `{name}` cannot be found ({error}). Write it to a file with %%writefile "
                "and import it, or define it in a cell of this notebook."
            ) from None
        if obj.__name__ != name:
            source += f"\n{name} = {obj.__name__}\n"
        functions = ([member for member in vars(obj).values() if inspect.isfunction(member)]
                     if inspect.isclass(obj) else [obj])
        namespace = functions[0].__globals__ if functions else vars(sys.modules[obj.__module__])
        for function in functions:
            for dependency in sorted(_global_names(function.__code__)):
                if dependency in namespace and dependency != name:
                    self.add_object(dependency, namespace[dependency], name)
                elif dependency not in namespace and not hasattr(builtins, dependency) and dependency != name:
                    raise NameError(f"`{name}` uses `{dependency}`, which is not defined: define it before launching.")
        self.sources.append(source)

    def script(self, entry: str, workdir: Path) -> str:
        header = "# Generated by harness.launch: the launched function and what it uses, run on every rank.\n"
        body = "\n".join(["from __future__ import annotations", *self.imports, *self.constants, "", *self.sources])
        main = ("\nif __name__ == '__main__':\n    from harness.launch import run_rank\n"
                f"    run_rank({entry}, {str(workdir)!r})\n")
        return header + body + main


def function_script(fn: Callable[..., Any], workdir: Path) -> str:
    """The source of a script that runs `fn` on a rank (what `launch` gives torchrun).

    Raises:
        TypeError: `fn` (or something it uses) cannot be sent: a lambda, a closure, an object that is
            neither a module, an importable function or class, a notebook function or class, nor a literal.
    """
    _check_sendable_function(fn, "the launched function")
    builder = _ScriptBuilder()
    if _importable(fn):
        builder.add_object(fn.__name__, fn, fn.__name__)
    else:
        builder.done.add(fn.__name__)  # a helper that calls it back must not add it a second time
        builder.add_source(fn.__name__, fn)
    return builder.script(fn.__name__, workdir)
