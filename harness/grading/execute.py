"""Notebook execution for grading that survives what submissions do: dying and hung kernels, output floods.

nbgrader's autograde runs its preprocessors in order; the grader replaces its `Execute` with
`SandboxedExecute` and surrounds it with `InjectGuard` (the grader's own cells: the tamper guard, and after
every graded test cell a probe cell that sends the judge its observations) and `StripGuard` (removes them
again, keeping what they displayed for the grader):

- a kernel that dies (os._exit, a segfault, the OOM killer) no longer aborts the whole notebook: the cells
  that finished keep their outputs (so their tests keep their points), the cell that killed the kernel gets
  an explanatory error, and the rest are marked as not run;
- a cell past its timeout is interrupted (nbgrader's behaviour); if the kernel then does not answer a
  probe, it is killed and treated like a dead one, so one hostile loop costs one timeout, not one per cell;
- the whole-submission limit is a deadline: no cell runs past it (a cell's timeout is what is left of it),
  the cell it cuts and the later ones are marked not run, and the cells before it keep their points;
- a cell's output beyond `max_output_bytes` is dropped as it arrives (nbgrader's LimitOutput trims only
  after everything was held in memory), with a note on stdout where it was cut;
- what happened is written to `report_path` (JSON) for the grades CSV.
"""

from __future__ import annotations

import ast
import json
import math
import os
import queue
import time
from pathlib import Path
from typing import Any

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Float, Integer, Unicode

from harness.contract.protocol import OBSERVATION_MIME
from harness.grading import tamper

GUARD_KEY = "harness_guard"
PROBE_ROLE = "probe"
# What the end-of-run report calls a fork bomb (processes besides the kernel), busy (their CPU-seconds; any one
# running is busy too) and full
# (a /tmp or /dev/shm with less than this share free).
FORK_BOMB_PROCESSES, BUSY_CPU_SECONDS, FULL_SHARE = 64, 1.0, 0.05
KERNEL_SECONDS = "[grader] kernel execution seconds:"  # the log line that times the kernel's own execution


def error_output(ename: str, evalue: str) -> NotebookNode:
    """An nbformat error output (scored as a failure by nbgrader) with a one-line traceback."""
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def cell_label(cell: NotebookNode, index: int) -> str:
    """How a report names a cell: its nbgrader grade id when it has one, else its position."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"cell {index} ({grade_id})" if grade_id else f"cell {index}"


def _events_path_append(path: str, key: str, value: Any) -> None:
    """Add `value` to the list `key` of the JSON report at `path`."""
    report = Path(path)
    data = json.loads(report.read_text()) if report.exists() else {}
    data.setdefault(key, []).append(value)
    report.write_text(json.dumps(data, indent=1))


class SandboxedExecute(Execute):
    """nbgrader's Execute, keeping finished cells when the kernel dies or hangs, and capping output."""

    report_path = Unicode("", help="JSON file the execution events are appended to").tag(config=True)
    max_output_bytes = Integer(1_000_000, help="output kept per cell; the rest is dropped").tag(config=True)
    runtime_dir = Unicode("", help="folder of the kernel's connection file and ipc sockets (shared with the "
                          "sandbox, which has no network to reach a TCP port)").tag(config=True)
    probe_output_bytes = Integer(96 * 2**20, help="output kept per probe cell (observations)").tag(config=True)
    probe_seconds = Integer(10, help="how long a timed-out kernel has to answer before it is killed").tag(config=True)
    guard_timeout = Integer(300, help="timeout of the guard's own cells (installing imports torch)").tag(config=True)
    deadline = Float(0.0, help="time.monotonic() by which execution must end (0: none)").tag(config=True)
    submission_seconds = Integer(0, help="the whole-submission limit the deadline comes from").tag(config=True)
    raise_on_iopub_timeout = Bool(False, help="a silent hung cell ends in the timeout and the probe, "
                                  "instead of aborting the notebook").tag(config=True)
    # Once the last cell has run, nothing the kernel does is graded: it is killed, not asked to shut down (a graceful
    # end costs a second or two per submission, waiting on its exit and its heartbeat).
    shutdown_kernel = Unicode("immediate").tag(config=True)

    def create_kernel_manager(self) -> Any:
        """nbclient's kernel manager, talking to the kernel over ipc sockets in `runtime_dir` when set."""
        km = super().create_kernel_manager()
        if self.runtime_dir:
            km.transport = "ipc"
            km.connection_file = str(Path(self.runtime_dir) / "kernel.json")
            km.ip = str(Path(self.runtime_dir) / "kernel-ipc")
        return km

    def _cell_timeout(self, cell: NotebookNode) -> int:
        """The guard's cells get their own timeout (a short student timeout must not fail the grader); no cell
        runs past the deadline."""
        timeout = self.guard_timeout if GUARD_KEY in cell.get("metadata", {}) else self.timeout
        return max(1, min(timeout, math.ceil(self._left()))) if self.deadline else timeout

    def _left(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def _stop_at_deadline(self, cell: NotebookNode, index: int) -> None:
        """Record that the whole-submission limit cut this cell: it and every later cell are not run."""
        self._stopped = f"the whole-submission limit of {self.submission_seconds} s was reached"
        self._record("submission_limit", cell_label(cell, index))

    def preprocess(self, nb: NotebookNode, resources: Any = None, km: Any = None) -> tuple[NotebookNode, Any]:
        """Execute every cell; never raises because of the kernel. The worker's log gets the time the kernel took
        (`KERNEL_SECONDS`: its start, its cells, its end), which `benchmarks/grading_overhead.py` leaves out."""
        self._stopped = ""
        self._output_bytes: dict[int, int] = {}
        self._timed_out: set[int] = set()
        self.timeout_func = self._cell_timeout
        started = time.perf_counter()
        try:
            return super().preprocess(nb, resources, km)
        finally:
            print(f"{KERNEL_SECONDS} {time.perf_counter() - started:.3f}", flush=True)

    def _record(self, key: str, value: Any) -> None:
        if self.report_path:
            _events_path_append(self.report_path, key, value)

    def preprocess_cell(self, cell: NotebookNode, resources: Any, index: int) -> tuple[NotebookNode, Any]:
        """Execute one cell, or mark it not run once the kernel is gone."""
        if cell.cell_type != "code":
            return cell, resources
        if not self._stopped and self.deadline and self._left() < 1:
            self._stop_at_deadline(cell, index)
        if self._stopped:
            cell.outputs = [error_output("NotExecuted", f"not run: {self._stopped}")]
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = f"the kernel died while running {cell_label(cell, index)}"
            cell.outputs.append(error_output(
                "KernelDied", f"{self._stopped} (a crash, os._exit, or memory exhausted); cells before it keep "
                "their results"))
            self._record("kernel_died", cell_label(cell, index))
            return cell, resources
        except CellTimeoutError:  # no reply and no output: treat as a hung kernel below
            cell.outputs.append(error_output("CellTimeoutError", f"{cell_label(cell, index)} timed out"))
            self._timed_out.add(index)
            self._record_timeout(cell, index)
        if index in self._timed_out and self._stopped:
            run_sync(self.km.shutdown_kernel)(now=True)  # past the deadline: nothing more runs in this kernel
        elif index in self._timed_out and not run_sync(self._kernel_responds)():
            self._stopped = f"the kernel ignored the interrupt after {cell_label(cell, index)} timed out"
            self._record("kernel_hung", cell_label(cell, index))
            run_sync(self.km.shutdown_kernel)(now=True)
        elif index == max(i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"):
            self._record_daemons()
        return cell, resources

    def _record_daemons(self) -> None:
        """Record what the sandbox still runs and holds after the last cell, before its end frees it all.

        Processes that left the kernel's process tree (daemonised: setsid, double fork) are re-parented to the
        sandbox's first process rather than the machine's, so they are still seen here. Every process besides
        the kernel is counted (a fork bomb stops at the process cap) with the CPU time it used (busy processes
        take it from the classmates graded beside it), and a /tmp or /dev/shm nearly full is named. Children
        the kernel holds (DataLoader workers) are reported only when they are many or busy.
        """
        import psutil

        launcher = getattr(getattr(self.km, "provisioner", None), "process", None)
        if launcher is None:
            return
        try:
            sandbox_init = [p for p in psutil.Process(launcher.pid).children() if p.name() == "bwrap"]
            inside = [p for init in sandbox_init for p in init.children(recursive=True)]
            kernels = [p for init in sandbox_init for p in init.children()
                       if "ipykernel_launcher" in " ".join(p.cmdline())]  # its forks are children of it
            orphans = [p for init in sandbox_init for p in init.children() if p not in kernels]
            names = sorted({" ".join(p.cmdline())[:60] for p in orphans})
            others = [p for p in inside if p not in kernels]
            busy = sum(sum(p.cpu_times()[:2]) for p in others)
            running = sum(p.status() == psutil.STATUS_RUNNING for p in others)
        except psutil.Error:
            return
        if names:
            self._record("daemons", f"{len(names)} ({'; '.join(names)})")
        if len(others) >= FORK_BOMB_PROCESSES or busy >= BUSY_CPU_SECONDS or running:
            self._record("processes", f"{len(others)} processes besides the kernel were running at the end ({running} "
                         f"busy), having used {busy:.1f} CPU-seconds")
        for folder in ("tmp", "dev/shm"):
            try:
                usage = os.statvfs(f"/proc/{kernels[0].pid}/root/{folder}")
            except (OSError, IndexError):
                continue
            size, free = usage.f_blocks * usage.f_frsize, usage.f_bavail * usage.f_frsize
            if size and free < size * FULL_SHARE:
                self._record("tmpfs_full", f"/{folder} ({(size - free) // 2**20} of {size // 2**20} MiB)")

    def on_cell_executed(self, **kwargs: Any) -> None:
        """nbgrader's reply check, plus recording timeouts and exhausted memory."""
        super().on_cell_executed(**kwargs)
        cell, index, reply = kwargs["cell"], kwargs["cell_index"], kwargs["execute_reply"]
        ename = reply["content"].get("ename", "")
        if ename == "CellTimeoutError":
            self._timed_out.add(index)
            self._record_timeout(cell, index)
        elif ename == "MemoryError" or "can't allocate memory" in reply["content"].get("evalue", ""):
            self._record("memory", cell_label(cell, index))

    def _record_timeout(self, cell: NotebookNode, index: int) -> None:
        """A timed-out cell: cut by the deadline, or over its own per-cell limit."""
        if self.deadline and self._left() < 1:
            self._stop_at_deadline(cell, index)
        else:
            self._record("timeout", cell_label(cell, index))

    async def _kernel_responds(self) -> bool:
        """Whether the kernel answers an empty execute request within `probe_seconds`."""
        msg_id = self.kc.execute("", silent=True, store_history=False)
        deadline = time.monotonic() + self.probe_seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await self.kc.shell_channel.get_msg(timeout=left)
            except queue.Empty:
                return False
            if message["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def output(self, outs: list, msg: dict, display_id: str | None, cell_index: int) -> NotebookNode | None:
        """Keep an output unless the cell already produced `max_output_bytes`; errors are always kept."""
        if msg["msg_type"] != "error":
            size = len(json.dumps(msg["content"]))
            before = self._output_bytes.get(cell_index, 0)
            self._output_bytes[cell_index] = before + size
            role = self.nb.cells[cell_index].get("metadata", {}).get(GUARD_KEY, "")
            limit = self.probe_output_bytes if role.startswith(PROBE_ROLE) else self.max_output_bytes
            if before + size > limit:
                if before <= limit:
                    outs.append(NotebookNode(output_type="stream", name="stdout", text=(
                        f"\n... output truncated by the grader after {limit} bytes ...\n")))
                    self._record("output_truncated", cell_label(self.nb.cells[cell_index], cell_index))
                return None
        return super().output(outs, msg, display_id, cell_index)


def check_arguments(test_source: str) -> str:
    """The expressions a test cell passes to `check(task, ...)` after the task id, as source ("train_step").

    Parsed from the assignment's own test cell (never the student's), so the probe cell names the same
    objects the test names.
    """
    for node in ast.walk(ast.parse(test_source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check":
            return ", ".join(ast.get_source_segment(test_source, arg) or "" for arg in node.args[1:])
    raise ValueError(f"the test cell calls no check(...): {test_source[:80]!r}")


def probe_source(task: str, arguments: str, cases: list[dict[str, Any]], nonce: str) -> str:
    """The code of the probe cell the grader runs after `task`'s test cell."""
    return (f"import harness.contract.protocol\n"
            f"harness.contract.protocol.emit({task!r}, lambda: [{arguments}], {cases!r}, {nonce!r})")


class InjectGuard(NbGraderPreprocessor):
    """Insert the grader's cells: the guard's install first; after every graded test cell, verify and probe."""

    lesson_module = Unicode("", help="the lesson's checks module, snapshotted by the guard").tag(config=True)
    nonce = Unicode("", help="secret the guard's heartbeat and the observations must carry").tag(config=True)
    cases = Unicode("{}", help="JSON: task -> list of cases ({hidden, seed}) its probe runs").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: Any) -> tuple[NotebookNode, Any]:
        """Return `nb` with the grader's cells inserted (they carry metadata so StripGuard finds them)."""
        cases = json.loads(self.cases)
        cells = [self._cell(tamper.install_source(self.lesson_module or None), "install")]
        for cell in nb.cells:
            cells.append(cell)
            nbgrader = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and nbgrader.get("grade") and not nbgrader.get("solution"):
                task = nbgrader["grade_id"]
                cells.append(self._cell(tamper.verify_source(task, self.nonce), task))
                source = probe_source(task, check_arguments(cell.source), cases.get(task, []), self.nonce)
                cells.append(self._cell(source, f"{PROBE_ROLE}:{task}"))
        nb.cells = cells
        return nb, resources

    @staticmethod
    def _cell(source: str, role: str) -> NotebookNode:
        return NotebookNode(cell_type="code", source=source, metadata={GUARD_KEY: role}, outputs=[],
                            execution_count=None, id=f"harness-guard-{role.replace(':', '-')}")


def _bundles(cell: NotebookNode, mime: str) -> list[Any]:
    """The `mime` data of a cell's display outputs, in order."""
    return [o["data"][mime] for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result") and mime in o.get("data", {})]


class StripGuard(NbGraderPreprocessor):
    """Remove the grader's cells after execution; record the guard's outcomes and the probes' observations."""

    report_path = Unicode(
        "", help="JSON file the guard cells' outcomes and the observations are written to").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: Any) -> tuple[NotebookNode, Any]:
        """Return `nb` without the grader's cells; what they displayed goes to the report."""
        kept, guards, probes = [], [], {}
        for cell in nb.cells:
            role = cell.get("metadata", {}).get(GUARD_KEY)
            if role is None:
                kept.append(cell)
                continue
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            outcome = "ok" if not errors else f"{errors[0].get('ename')}: {errors[0].get('evalue', '')[:200]}"
            if role.startswith(PROBE_ROLE):
                probes[role.split(":", 1)[1]] = {"bundles": _bundles(cell, OBSERVATION_MIME),
                                                 "error": "" if outcome == "ok" else outcome}
            else:
                guards.append({"role": role, "outcome": outcome, "heartbeats": _bundles(cell, tamper.GUARD_MIME)})
        if self.report_path:
            report = Path(self.report_path)
            data = json.loads(report.read_text()) if report.exists() else {}
            data.update(guard_cells=guards, probes=probes)
            report.write_text(json.dumps(data))
        nb.cells = kept
        return nb, resources
