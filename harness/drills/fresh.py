"""Start a fresh Python process that imports the harness from its source, never from bytecode.

The warm checker and the answer's runner are started with `python -B -P -c BOOT module args...`: `-B` writes no
`.pyc`, `-P` keeps the working directory off `sys.path`, and `BOOT` puts a finder first on `sys.meta_path` that
compiles every `harness.*` module from its `.py` file. A `.pyc` planted in `harness/**/__pycache__` (with the
source's size and time, so that Python's own check accepts it) is never read by them. Compiling the harness
costs a fraction of a second once per process; torch and the other libraries keep their usual cache.

This module imports nothing heavy: the client (`harness drill check`) uses it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

BOOT = """
import importlib.machinery as _machinery, runpy as _runpy, sys as _sys
_sys.dont_write_bytecode = True
_sys.path.insert(0, {root!r})


class _SourceOnly(_machinery.SourceFileLoader):
    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


class _HarnessFromSource:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] != "harness":
            return None
        spec = _machinery.PathFinder.find_spec(name, path)
        if spec is not None and type(spec.loader) is _machinery.SourceFileLoader:
            spec.loader = _SourceOnly(spec.loader.name, spec.loader.path)
        return spec


_sys.meta_path.insert(0, _HarnessFromSource)
_sys.argv = [{module!r}, *_sys.argv[1:]]
_runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""


def python_command(module: str, *args: str, root: Path = REPO_ROOT) -> list[str]:
    """The command line that runs `module` as `__main__` in a fresh interpreter, the harness (the one under
    `root`) from source."""
    return [sys.executable, "-B", "-P", "-c", BOOT.format(root=str(root), module=module), *args]
