"""The contract every check and every drill stands on: probe -> data -> judge recomputes.

- `case`: `Case`, the inputs' family and seed offset that probe and judge share.
- `failure`: `CheckFailed`, `fail` (the four-part teaching message), `Requirement`, `Hints`.
- `registry`: one `Check` per task id (probe, judge, hints, requirement table), loaded lazily per lesson.
- `wire`: observations as data (no pickle), the only thing that crosses from a probe to a judge.
- `protocol`: `observe` (probe side: run the probe, seal its observation) and `decide` (judge side: unseal,
  refuse non-finite leaves, judge).
- `instruments`: what probes observe behaviour through (optimizer steps, forward modes, host syncs, a
  recording GradScaler, snapshots).
- `forbidden`: "do not call X" (`CallRecorder` in the probe, `forbid` in the judge).
- `compare`: the judge-side vocabulary every observed number and tensor passes through; a comparison passes
  only when it positively holds, so NaN never satisfies one.
- `inputs`: tensors and models built from a seed without touching the student's random stream.
- `errors`: explains an exception of the student's code by its line and its usual cause.

Probe side (what runs in the student's kernel): `case`, `inputs`, `failure`, `registry`, `wire`, `instruments`,
`forbidden.CallRecorder`, `protocol.observe`. Judge side: `compare`, `protocol.decide` and the task judges
(`harness/judges/`). Neither side imports anything above this package.
"""
