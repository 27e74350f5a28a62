"""Resume torture: kill `fit` with SIGKILL at random moments, resume it, and compare with an uninterrupted run.

Each trial trains a small MLP (dropout, AdamW, clipping, a scheduler) in a real subprocess with
`checkpoint_dir` and `resume=True`, kills the whole process group (DataLoader workers included) with
SIGKILL at a random moment of training (inside an epoch, between epochs or during a checkpoint write),
starts it again, and repeats until the run finishes. The final weights and history (timings aside) must
equal, bit for bit, those of the same configuration run once without interruption.

A configuration is a `Setup`: worker count, persistent workers or not, shuffled or not, per-step or
per-epoch scheduler, fp32 or bf16 (CPU autocast). Trials cycle through every combination the chosen
worker counts allow.

    .venv/bin/python benchmarks/resume_torture.py --trials 20 --workers 0 2

prints one line per trial and a Markdown summary; the exit status is 1 if any trial diverged.
`tests/test_resume_torture.py` runs a few trials of this same code in the test suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 6
TIMING_COLUMNS = ("epoch_seconds", "samples_per_second")
READY, DONE = "training starts", "training done"  # the child's two lines on stdout


@dataclass(frozen=True)
class Setup:
    """One configuration of the training run under test."""

    workers: int = 0
    persistent: bool = False
    shuffle: bool = True
    interval: str = "step"
    precision: str = "fp32"

    def name(self) -> str:
        workers = f"{self.workers} workers" + (" persistent" if self.persistent else "")
        return f"{workers}, {'shuffled' if self.shuffle else 'in order'}, per-{self.interval}, {self.precision}"


@dataclass
class TrialResult:
    """What one trial did and whether it matched the uninterrupted run."""

    setup: Setup
    kills: int
    resumed_from: list[int]
    matched: bool
    detail: str = ""


def setups(workers: list[int]) -> list[Setup]:
    """Every configuration for the given worker counts (persistent workers only where workers > 0)."""
    found = []
    for count, persistent, shuffle, interval, precision in itertools.product(
        workers, (True, False), (True, False), ("step", "epoch"), ("fp32", "bf16")
    ):
        if persistent and count == 0:
            continue
        found.append(Setup(count, persistent, shuffle, interval, precision))
    return found


def child(setup: Setup, checkpoint_dir: str, out: str) -> None:
    """The training run under test, in this process (run as `--child`)."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from harness.data.loaders import make_loaders
    from harness.repro import make_generator, seed_worker
    from harness.train import fit

    torch.set_num_threads(1)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(1920, 8, generator=generator)
    targets = (inputs[:, :2].sum(dim=1) + 0.5 * torch.randn(1920, generator=generator) > 0).long()
    dataset = TensorDataset(inputs, targets)
    if setup.persistent and setup.shuffle:  # lesson 03's recommended loaders
        loaders = make_loaders(dataset, batch_size=16, val_fraction=0.2, test_fraction=0.0, seed=3,
                               num_workers=setup.workers, device="cpu")
        train, val = loaders.train, loaders.val
    else:
        options = {"batch_size": 16, "num_workers": setup.workers, "worker_init_fn": seed_worker,
                   "persistent_workers": setup.persistent}
        train = DataLoader(TensorDataset(inputs[:1536], targets[:1536]), shuffle=setup.shuffle,
                           generator=make_generator(3), **options)
        val = DataLoader(TensorDataset(inputs[1536:], targets[1536:]), **options)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if setup.interval == "step":
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-2, total_steps=EPOCHS * len(train))
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    print(READY, flush=True)
    history = fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=EPOCHS,
                  precision=setup.precision, max_grad_norm=1.0, scheduler=scheduler, checkpoint_dir=checkpoint_dir,
                  resume=True, progress=False)
    print(DONE, flush=True)
    torch.save({"model": model.state_dict(), "history": history.drop(columns=list(TIMING_COLUMNS)).to_dict("list")},
               out)


_children: list[subprocess.Popen] = []  # killed on the way out if still running (they have their own sessions)


def _start(setup: Setup, checkpoint_dir: Path, out: Path) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(asdict(setup)),
               str(checkpoint_dir), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # its own process group, so that one killpg reaches the DataLoader workers too
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True, cwd=ROOT)
    _children.append(process)
    return process


def kill_children() -> None:
    """Kill every training child still running, with its DataLoader workers."""
    for process in _children:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    _children.clear()


def _wait_ready(process: subprocess.Popen) -> None:
    line = process.stdout.readline()
    if line.strip() != READY:
        process.wait()
        raise RuntimeError(f"the training child failed before training: {line}{process.stderr.read()}")


def _finish(process: subprocess.Popen, timeout: float = 300) -> None:
    _, stderr = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise RuntimeError(f"the training child exited with {process.returncode}:\n{stderr}")


def reference(setup: Setup, directory: Path) -> tuple[Path, float]:
    """Run `setup` once without interruption; returns its output file and its training time in seconds."""
    out = directory / "reference.pt"
    process = _start(setup, directory / "reference", out)
    _wait_ready(process)
    started = time.perf_counter()
    process.stdout.readline()  # DONE, or nothing if the child failed (then _finish says why)
    train_seconds = time.perf_counter() - started
    _finish(process)
    return out, train_seconds


def _last_epoch(checkpoint_dir: Path) -> int:
    path = checkpoint_dir / "last.pt"
    return int(torch.load(path, weights_only=True)["epoch"]) if path.is_file() else 0


def trial(setup: Setup, directory: Path, reference_out: Path, train_seconds: float, rng: random.Random,
          max_kills: int = 3) -> TrialResult:
    """Kill a run of `setup` up to `max_kills` times at random moments, resume it to the end, and compare."""
    checkpoint_dir, out = directory / "run", directory / "run.pt"
    kills, resumed_from = 0, []
    for _ in range(max_kills):
        remaining = train_seconds * (EPOCHS - _last_epoch(checkpoint_dir)) / EPOCHS  # of the training time
        process = _start(setup, checkpoint_dir, out)
        _wait_ready(process)
        try:
            process.wait(timeout=rng.uniform(0.0, remaining))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            kills += 1
            resumed_from.append(_last_epoch(checkpoint_dir))
            continue
        _finish(process)
        break
    else:
        process = _start(setup, checkpoint_dir, out)
        _wait_ready(process)
        _finish(process)
    matched, detail = compare(reference_out, out)
    return TrialResult(setup, kills, resumed_from, matched, detail)


def compare(expected_path: Path, actual_path: Path) -> tuple[bool, str]:
    """Whether two runs' weights and histories are equal bit for bit, and the first difference if not."""
    expected = torch.load(expected_path, weights_only=True)
    actual = torch.load(actual_path, weights_only=True)
    for name, tensor in expected["model"].items():
        if not torch.equal(tensor, actual["model"][name]):
            return False, f"weights differ: {name}"
    for column, values in expected["history"].items():
        if actual["history"].get(column) != values:
            return False, f"history differs in {column}: {values} vs {actual['history'].get(column)}"
    return True, ""


def run(trials: int, workers: list[int], seed: int, max_kills: int = 3, offset: int = 0) -> list[TrialResult]:
    """`trials` trials per worker count, cycling through the configurations from the `offset`-th; prints one
    line per trial."""
    rng = random.Random(seed)
    results: list[TrialResult] = []
    references: dict[Setup, tuple[Path, float]] = {}
    with tempfile.TemporaryDirectory(prefix="resume-torture-") as tmp:
        for count in workers:
            configurations = setups([count])
            for index in range(trials):
                setup = configurations[(offset + index) % len(configurations)]
                if setup not in references:
                    folder = Path(tmp) / f"ref{len(references)}"
                    folder.mkdir()
                    references[setup] = reference(setup, folder)
                folder = Path(tmp) / f"trial{len(results)}"
                folder.mkdir()
                try:
                    result = trial(setup, folder, *references[setup], rng, max_kills)
                except RuntimeError as error:  # a resumed child failed, e.g. on a damaged checkpoint
                    kill_children()
                    result = TrialResult(setup, 0, [], False, str(error).strip().splitlines()[-1])
                results.append(result)
                print(f"{'ok  ' if result.matched else 'FAIL'} {setup.name()}: {result.kills} kills, resumed from "
                      f"epochs {result.resumed_from} {result.detail}", flush=True)
    return results


def summary(results: list[TrialResult]) -> str:
    """A Markdown table: trials, kills and matches per worker count."""
    lines = ["| workers | trials | kills | resumed runs equal to the uninterrupted run |", "|---|---|---|---|"]
    for count in sorted({r.setup.workers for r in results}):
        mine = [r for r in results if r.setup.workers == count]
        lines.append(f"| {count} | {len(mine)} | {sum(r.kills for r in mine)} | "
                     f"{sum(r.matched for r in mine)} of {len(mine)} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        setup_json, checkpoint_dir, out = sys.argv[2:5]
        child(Setup(**json.loads(setup_json)), checkpoint_dir, out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader worker counts")
    parser.add_argument("--max-kills", type=int, default=3, help="kills per trial at most")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill times")
    parser.add_argument("--offset", type=int, default=0, help="start the cycle of configurations at this one")
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        results = run(args.trials, args.workers, args.seed, args.max_kills, args.offset)
    finally:
        kill_children()
    print(f"\n{summary(results)}\n\n{len(results)} trials in {time.perf_counter() - started:.0f} s")
    sys.exit(0 if all(r.matched for r in results) else 1)


if __name__ == "__main__":
    main()
