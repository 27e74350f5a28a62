"""Run the held-out entries against their visible checks and write results.json and a Markdown table.

One fresh interpreter per lesson imports torch and the harness once; each entry then runs in a process forked
from it (the lesson's PRELUDE, the entry's source, then `check(task, *names)`), so no state passes from one
entry to the next, bounded to 60 s. Usage: `.venv/bin/python benchmarks/heldout/run.py [LESSON ...] [-j JOBS]`.
"""

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LESSONS = ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "12", "13", "14", "15", "16"]
TIMEOUT_S = 60


def run_in_child(prelude: str, entry, folder: Path) -> None:
    """In a forked child: exec the cell as __main__ from a file (so inspect.getsource works), check, write."""
    from harness.checks import check

    os.setpgid(0, 0)
    os.chdir(folder)
    script = folder / "cell.py"
    script.write_text(prelude + "\n" + entry.source)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    sys.modules["__main__"] = main
    try:
        exec(compile(script.read_text(), str(script), "exec"), main.__dict__)
        check(entry.task, *[main.__dict__[name] for name in entry.names])
        result = {"passed": True, "code": None, "message": ""}
    except BaseException as error:  # a student's cell may raise anything, SystemExit included
        result = {"passed": False, "code": getattr(error, "code", None) or type(error).__name__,
                  "message": str(error)}
    (folder / "result.json").write_text(json.dumps(result, default=str))


def run_entry(prelude: str, entry, timeout_s: float) -> dict:
    """Fork, run the entry in the child within timeout_s, and return passed/code/message."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        pid = os.fork()
        if pid == 0:
            try:
                run_in_child(prelude, entry, folder)
            finally:
                os._exit(0)
        deadline = time.monotonic() + timeout_s
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"passed": False, "code": "timeout", "message": f"no result within {timeout_s:g} s"}
            time.sleep(0.05)
        path = folder / "result.json"
        if not path.exists():
            return {"passed": False, "code": "crash", "message": "the child process died without a result"}
        return json.loads(path.read_text())


def worker(lesson: str, indices: list[int] | None, timeout_s: float) -> None:
    """Run the entries of one lesson (all, or those indices; torch imported once) and print the rows as JSON."""
    import torch  # noqa: F401  imported once here, inherited by every forked entry

    import harness.checks  # noqa: F401

    module = importlib.import_module(f"lesson{lesson}")
    rows = []
    for index, entry in enumerate(module.ENTRIES):
        if indices is not None and index not in indices:
            continue
        result = run_entry(module.PRELUDE, entry, timeout_s)
        caught = (not result["passed"]) if entry.kind == "mistake" else result["passed"]
        rows.append({"id": f"{lesson}-{index}", "task": entry.task, "kind": entry.kind, "story": entry.story,
                     "cause": entry.cause, "caught": caught, "code": result["code"], "message": result["message"]})
    print(json.dumps(rows))


def run_lesson(lesson: str, only: list[str], timeout_s: float) -> list[dict]:
    """Run one lesson's worker (its entries named in `only`, or all) in a fresh interpreter; return its rows."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HARNESS_BUDGET": "grading", "PYTHONPATH": str(ROOT)}
    indices = [name.split("-")[1] for name in only if name.split("-")[0] == lesson]
    done = subprocess.run([sys.executable, __file__, "--worker", lesson, "--timeout", str(timeout_s),
                           *(["--only", *indices] if indices else [])], capture_output=True, text=True,
                          env=env, cwd=HERE)
    if done.returncode != 0:
        raise RuntimeError(f"lesson {lesson}: worker failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run the chosen lessons (all by default), merge into results.json and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("lessons", nargs="*", default=LESSONS)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="lessons run at the same time")
    parser.add_argument("--only", nargs="+", default=[], help="entry ids to run, such as 08-20 (default: all)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds each entry may take")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if options.worker:
        worker(options.worker, [int(i) for i in options.only] if options.only else None, options.timeout)
        return
    lessons = sorted({name.split("-")[0] for name in options.only}) if options.only else options.lessons
    with ThreadPoolExecutor(options.jobs) as pool:
        rows = [row for rows in pool.map(lambda lesson: run_lesson(lesson, options.only, options.timeout), lessons)
                for row in rows]
    path = HERE / "results.json"
    previous = json.loads(path.read_text()) if path.exists() else []
    merged = {row["id"]: row for row in previous if row["id"].split("-")[0] not in lessons or options.only}
    merged.update({row["id"]: row for row in rows})
    ordered = sorted(merged.values(), key=lambda row: (row["id"].split("-")[0], int(row["id"].split("-")[1])))
    path.write_text(json.dumps(ordered, indent=1) + "\n")
    print("| id | task | kind | caught | code | message (300 chars) |\n|---|---|---|---|---|---|")
    for row in rows:
        message = " ".join(row["message"][:300].split()).replace("|", "/")
        print(f"| {row['id']} | {row['task']} | {row['kind']} | {row['caught']} | {row['code']} | {message} |")


if __name__ == "__main__":
    main()
