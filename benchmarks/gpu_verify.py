"""The course on a CUDA GPU, verified by one command in about 8 minutes; `--dry` runs what a CPU can.

A GPU is lent now and then, for minutes, so everything is prepared here and one call does it all. The steps,
each bounded in time, each run even when an earlier one failed, the whole run under a total budget:

1. the environment, first in the log: commit and whether the tree was clean, Python, torch, CUDA, cuDNN, the
   device's name and capability, `nvidia-smi`, the harness's own environment report;
2. the GPU tests (`pytest -m gpu`): fp16 with a GradScaler, bf16, the fast path, `torch.compile`, a checkpoint
   saved on the GPU and loaded on the CPU, NCCL, pinned loaders, CUDA RNG state;
3. lessons 05, 10, 13 and 16 executed on the GPU, top to bottom, every check passing and nothing on stderr;
4. one lesson (05) graded through the instructors' pipeline (nbgrader, the sandbox, the judge): full marks;
5. an fp16-only pass, as on a T4: bf16 refused through `HARNESS_NO_BF16=1`, so the precision the harness
   chooses is fp16 with a GradScaler, and a short `fit` in it trains;
6. the benchmarks in their shortest honest form: the capstone CNN in fp32 (TF32 off), TF32, bf16 and fp16,
   with and without `torch.compile` and channels_last, with peak memory and MFU (`gpu_precision.py`); the
   speed path against the hand-tuned loop and the airbench-class network's time to accuracy on CIFAR-10-sized
   procedural data (`gpu_speedrun.py`); `fit` against the hand-written loop (`engine_overhead.py`).

Everything lands in `--out` (the device tool's `$OUT`) as three files: `gpu_verify.log` (the environment, then
every step's command and output), `summary.md` (the table of steps: passed, failed, timed out, skipped and why,
seconds) and `work.tar.gz` (the benchmarks' CSVs and machine records, the graded lesson's report). Exit status
0 when no step failed or timed out.

    # on the GPU machine (benchmarks/README.md, "GPU verification", says how to carry the wheels it needs):
    python3 benchmarks/gpu_verify.py --out "$OUT"
    # here, on a CPU (the suite runs this): every step that can run without CUDA runs, in a tiny form
    .venv/bin/python benchmarks/gpu_verify.py --dry --out build/gpu-verify
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_TESTS = ("tests/test_gpu.py", "tests/test_fast.py", "tests/test_env.py", "tests/test_speed.py",
             "tests/test_launch.py", "tests/test_repro.py", "tests/test_data_loaders.py")
GPU_LESSONS = ("05_mixed_precision", "10_capstone", "13_performance_memory", "16_export_serving")
GRADED_LESSON = "05_mixed_precision"
NO_BF16 = "HARNESS_NO_BF16"


@dataclass(frozen=True)
class Step:
    """One bounded step of the verification.

    Attributes:
        name: its row in the summary.
        command: what runs on the GPU machine (argv; `{out}` is replaced by the output folder).
        timeout_s: the most it may take; the total budget may cut it shorter.
        needs: what the real step needs: "cuda", a module name, or a program (`bin:NAME`).
        dry: what `--dry` runs instead on a CPU (argv), or None to skip the step there.
        env: extra environment variables for the step.
    """

    name: str
    command: tuple[str, ...]
    timeout_s: int
    needs: tuple[str, ...] = ("cuda",)
    dry: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """How a step ended: "passed", "failed", "timed out" or "skipped", with why and how long."""

    step: str
    status: str
    seconds: float
    detail: str


def steps(out: Path) -> list[Step]:
    """The verification's steps in the order they run (paths checked now, so a typo fails the dry run)."""
    py = sys.executable
    lessons = [str(ROOT / "solutions" / name / f"{name}.ipynb") for name in GPU_LESSONS]
    scripts = {name: ROOT / "benchmarks" / f"{name}.py"
               for name in ("gpu_precision", "gpu_speedrun", "engine_overhead")}
    missing = [path for path in [*map(Path, lessons), *scripts.values(), *(ROOT / t for t in GPU_TESTS)]
               if not path.exists()]
    if missing:
        raise FileNotFoundError(f"gpu_verify names files that do not exist: {', '.join(map(str, missing))}")
    pytest = (py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", *GPU_TESTS)
    bench = str(out / "bench")
    return [
        Step("GPU tests (pytest -m gpu)", pytest, 150, dry=(*pytest, "--collect-only")),
        Step("lessons 05, 10, 13, 16 on the GPU", (py, str(ROOT / ".ci" / "run_notebooks.py"), *lessons), 240,
             needs=("cuda", "nbclient", "ipykernel")),
        Step(f"{GRADED_LESSON} graded at full marks",
             (py, "-m", "harness", "course", "--lessons", GRADED_LESSON, "--skip-showcase",
              "--out", str(out / "course")),
             150, needs=("cuda", "nbgrader", "bin:bwrap")),
        Step("fp16-only pass (bf16 refused, as on a T4)", (py, __file__, "--fp16-only-check"), 60,
             dry=(py, __file__, "--fp16-only-check"), env={NO_BF16: "1"}),
        Step("capstone CNN: fp32, TF32, bf16, fp16, compile, channels_last",
             (py, str(scripts["gpu_precision"]), "--images", "20000", "--repeats", "3", "--out", bench), 150,
             dry=(py, str(scripts["gpu_precision"]), "--images", "20000", "--repeats", "3", "--out", bench,
                  "--device", "cpu", "--no-compile", "--images", "64", "--batch-size", "32", "--width", "8",
                  "--warmup", "1", "--repeats", "2")),
        Step("speed path against the hand loop; airbench time to accuracy",
             (py, str(scripts["gpu_speedrun"]), "--repeats", "3", "--accuracy-runs", "2", "--out", bench), 180,
             dry=(py, str(scripts["gpu_speedrun"]), "--repeats", "3", "--accuracy-runs", "2", "--out", bench,
                  "--quick", "--device", "cpu")),
        Step("fit against the hand-written loop",
             (py, str(scripts["engine_overhead"]), "--device", "cuda", "--repeats", "3", "--out", bench), 90,
             dry=(py, str(scripts["engine_overhead"]), "--device", "cuda", "--repeats", "3", "--out", bench,
                  "--device", "cpu", "--samples", "512", "--epochs", "2", "--repeats", "2")),
    ]


def missing_needs(step: Step, dry: bool) -> list[str]:
    """What the step needs that this machine lacks (in a dry run, only what its dry command needs)."""
    if dry:
        return [] if step.dry is not None else ["a CUDA device (no dry form)"]
    lacking = []
    for need in step.needs:
        if need == "cuda":
            import torch

            if not torch.cuda.is_available():
                lacking.append("a CUDA device")
        elif need.startswith("bin:"):
            if shutil.which(need[4:]) is None:
                lacking.append(f"the program {need[4:]}")
        elif importlib.util.find_spec(need) is None:
            lacking.append(f"the Python package {need}")
    return lacking


def run_step(step: Step, dry: bool, seconds_left: float, log) -> Outcome:
    """Run one step within its timeout and the budget left; its output goes to the log; never raises."""
    lacking = missing_needs(step, dry)
    if lacking:
        return Outcome(step.name, "skipped", 0.0, "needs " + ", ".join(lacking))
    if seconds_left < 5:
        return Outcome(step.name, "skipped", 0.0, "the total time budget is spent")
    timeout = min(step.timeout_s, seconds_left)
    command = step.dry if dry else step.command
    log.write(f"\n## {step.name}\n$ {' '.join(command)}\n")
    log.flush()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **step.env, "PYTHONPATH": path}
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(step.name, "timed out", time.monotonic() - started, f"stopped after {timeout:.0f} s")
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Outcome(step.name, "failed", seconds, f"exit status {done.returncode} (the log has its output)")
    return Outcome(step.name, "passed", seconds, "dry form on the CPU" if dry and step.dry != step.command else "")


def environment_lines() -> list[str]:
    """The self-describing head of the log: what ran, where, on what."""
    import torch

    def output(command: list[str]) -> str:
        try:
            return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"unavailable ({error.__class__.__name__})"

    commit = output(["git", "rev-parse", "HEAD"])
    if commit:
        changed = output(["git", "status", "--porcelain"]).splitlines()
        tree = "clean" if not changed else f"{len(changed)} paths changed since the commit"
    else:  # the device tool copies the working tree without .git: the caller says what it was
        commit = os.environ.get("GPU_VERIFY_COMMIT", "unknown (no git here; set GPU_VERIFY_COMMIT)")
        tree = os.environ.get("GPU_VERIFY_TREE", "unknown (no git here; set GPU_VERIFY_TREE)")
    lines = [f"commit: {commit}", f"tree: {tree}", f"python: {platform.python_version()} ({sys.executable})",
             f"torch: {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            lines.append(f"cuda:{index}: {torch.cuda.get_device_name(index)}, "
                         f"capability {'.'.join(map(str, torch.cuda.get_device_capability(index)))}")
    else:
        lines.append("cuda: not available")
    lines.append("nvidia-smi:\n" + (output(["nvidia-smi"]) if shutil.which("nvidia-smi") else "not installed"))
    report = output([sys.executable, "-m", "harness", "env"])
    lines.append("harness env:\n" + (report or "unavailable"))
    return lines


def summary_table(outcomes: list[Outcome], dry: bool, total: float) -> str:
    """The Markdown summary: one row per step."""
    rows = ["| step | result | seconds | detail |", "|---|---|---|---|"]
    rows += [f"| {o.step} | {o.status} | {o.seconds:.0f} | {o.detail} |" for o in outcomes]
    counts = {status: sum(o.status == status for o in outcomes)
              for status in ("passed", "failed", "timed out", "skipped")}
    head = f"GPU verification{' (dry run, on a CPU)' if dry else ''}: " + \
        ", ".join(f"{n} {status}" for status, n in counts.items()) + f", {total:.0f} s in all."
    return head + "\n\n" + "\n".join(rows) + "\n"


def fp16_only_check() -> int:
    """With bf16 refused, the harness must choose fp16 with a GradScaler on CUDA, and a short fit trains in it."""
    import torch
    from torch import nn

    from harness.data import make_loaders, two_moons
    from harness.env import recommended_precision, supported_precisions
    from harness.train import fit

    if os.environ.get(NO_BF16) != "1":
        raise SystemExit(f"--fp16-only-check runs with {NO_BF16}=1 (gpu_verify sets it)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision, why = recommended_precision(device, supported_precisions(device))
    print(f"{device}: the harness chooses {precision} with {NO_BF16}=1 ({why})")
    if precision == "bf16" or (device.type == "cuda" and precision != "fp16"):
        print(f"FAILED: expected fp16 on CUDA (and never bf16) with {NO_BF16}=1, got {precision}")
        return 1
    loaders = make_loaders(two_moons(512, seed=0), batch_size=64, device=device)
    model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    history = fit(model, loaders.train, loaders.val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=3,
                  precision=precision, progress=False)
    losses = history["train_loss"].tolist()
    print(f"fit in {precision}: train loss per epoch {', '.join(f'{loss:.3f}' for loss in losses)}")
    if not (losses[-1] < losses[0]):
        print("FAILED: the training loss did not fall")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/gpu-verify"), help="folder for the log and summary")
    parser.add_argument("--dry", action="store_true", help="on a CPU: run every step that can run without CUDA")
    parser.add_argument("--budget", type=float, default=540, help="total seconds for all steps (default 540)")
    parser.add_argument("--fp16-only-check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fp16_only_check:
        return fp16_only_check()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out.resolve() / "work"
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    outcomes = []
    with open(args.out / "gpu_verify.log", "w") as log:
        log.write("# GPU verification" + (" (dry run)" if args.dry else "") + "\n")
        log.write("\n".join(environment_lines()) + "\n")
        for step in steps(work):
            outcome = run_step(step, args.dry, args.budget - (time.monotonic() - started), log)
            outcomes.append(outcome)
            print(f"{outcome.step}: {outcome.status} ({outcome.seconds:.0f} s) {outcome.detail}", flush=True)
    summary = summary_table(outcomes, args.dry, time.monotonic() - started)
    (args.out / "summary.md").write_text(summary)
    if work.exists():  # the benchmarks' CSVs and the graded lesson, as one file (the device tool returns 8 at most)
        shutil.make_archive(str(args.out / "work"), "gztar", work)
        shutil.rmtree(work)
    print("\n" + summary)
    return 1 if any(o.status in ("failed", "timed out") for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
