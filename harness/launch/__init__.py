"""Run a function or a script on N processes from a notebook: real torchrun, logs streamed, results back.

`launch(train, nproc=2, kwargs={...})` writes a small script holding `train`'s source (and the sources
of the notebook functions it calls), runs it with `torchrun --standalone --nproc-per-node=2`, streams
every rank's output into the notebook prefixed with its rank (on stdout, so a graded cell is not
zeroed), and returns every rank's return value. Why not `mp.spawn`: spawn pickles the function by
reference, and a function defined in a notebook cannot be imported by the child; why not fork: forking
after CUDA was initialised crashes. Sending source through torchrun is what also runs on many machines.

Failures are reported, never hung on: the rank that caused a failure is named, with its exception's
traceback or the signal that killed it, and its last output lines, and the other ranks are ended; a hang
names the ranks that did not arrive and where each one was (under gloo at the step deadline, `step_timeout_s`:
a collective that waits past it fails in the rank that waited, which asks the others where they are); no
process is left behind, even when the launching process is killed.

`launch_forked` is the fast variant the checks use (no interpreter start, ~0.2 s instead of ~3 s per
rank): CPU and gloo only, refused once CUDA is initialised in this process.

One module per job: `torchrun` (the torchrun launcher), `forked` (the fork launcher), `source` (shipping a
notebook function's source to the ranks), `rank` (what each torchrun rank runs), `transport` (values in and
out of the ranks), `outcome` (results and errors), `limits` (world size and port checks), `cli` (the
`harness launch` command), `runner` (torchrun's process, tied to the launcher), `lifeline` (processes and
work folders that die with the launcher), `rendezvous` (a store on a reserved port), `hangs` (where each rank
was). This package re-exports their public API.
"""

from __future__ import annotations

from harness.launch.cli import add_arguments, run
from harness.launch.forked import launch_forked
from harness.launch.limits import max_world_size, port_is_free
from harness.launch.outcome import LaunchError, LaunchResult
from harness.launch.rank import run_rank
from harness.launch.source import function_script
from harness.launch.torchrun import end_process_tree, launch

__all__ = [
    "LaunchError",
    "LaunchResult",
    "add_arguments",
    "end_process_tree",
    "function_script",
    "launch",
    "launch_forked",
    "max_world_size",
    "port_is_free",
    "run",
    "run_rank",
]
