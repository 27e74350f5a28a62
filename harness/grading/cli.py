"""`harness grade`: autograde a folder or LMS zip of submissions in parallel; grades CSV and class summary.

Each assignment grades into its own folder (`build/grades/<assignment>` by default); a folder holding
another assignment's grading is refused unless `--force`. Progress is a line per finished submission with
the time left (`progress`); the end says where everything is: grades, the mistake report, the LMS files
(`lms`: Canvas and Moodle imports, feedback archives; `--roster` to match students against a class list).
`--shard i/N` grades one slice of the class into its own folder (`shards`); `harness grade merge OUT...`
joins shard folders into one grading (`merge`); `--dask ADDRESS` (or `local:N`) grades on a Dask cluster
(`cluster`), alone or with `--shard`; `--regrade OUT` regrades by content (`regrade`: the tasks whose check
changed are judged again, the new or changed notebooks graded again, `--student ID` one student's), and grading
into a folder graded for the same assignment does the same. The course file (`--course`, default `course.toml`:
due dates, extensions, the late policy; `late`) is applied when the files are written (`publish`), from the stored
results: a regrade after editing it republishes and names whose points moved.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.grading.layout import check_assignment

if TYPE_CHECKING:
    from harness.grading.batch import Limits
    from harness.grading.jobs import GradeResult
    from harness.grading.late import Course, Late
    from harness.grading.lms import RosterEntry
    from harness.grading.regrade import Regrade
    from harness.grading.submissions import Submission

DEFAULT_OUT = Path("build/grades")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness grade`."""
    parser.add_argument("submissions", nargs="*", metavar="SUBMISSIONS",
                        help="folder with one folder per student, or flat <student>_*.ipynb files, or an LMS .zip; "
                        "or `merge OUT_0 OUT_1 ...` to join shard folders into --out")
    parser.add_argument("--assignment", help="assignment to grade, e.g. 04_training_loop (required to grade)")
    parser.add_argument("--workers", type=int, default=2, help="parallel grading processes (default 2)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default build/grades/ASSIGNMENT; with --shard i/N, "
                        "build/grades/ASSIGNMENT/shard-i-of-N); one assignment per folder")
    parser.add_argument("--force", action="store_true",
                        help="grade into --out even if it holds another assignment's grading (replacing its files)")
    parser.add_argument("--roster", type=Path, default=None,
                        help="class list CSV to match students against (a Canvas gradebook export, a Moodle grading "
                        "worksheet, or columns name and id); default: the ids in the LMS's file names")
    parser.add_argument("--lms-title", default="", help="the assignment's name in the LMS (default: ASSIGNMENT)")
    parser.add_argument("--canvas-assignment-id", default="",
                        help="Canvas's id of the assignment: the gradebook column becomes 'TITLE (ID)'")
    parser.add_argument("--course", type=Path, default=None, metavar="FILE",
                        help="the course file: due dates, extensions and the late policy, applied to the published "
                        "points (default: course.toml here, when present; see docs/course.example.toml)")
    parser.add_argument("--regrade", type=Path, default=None, metavar="OUT",
                        help="regrade the grading at OUT by content: re-judge only the tasks whose check changed "
                        "(from the stored observations), grade again only the new or changed notebooks (of "
                        "SUBMISSIONS, default: the folder OUT was graded from); print and add to OUT/regrade.md who "
                        "moved and why")
    parser.add_argument("--student", action="append", default=None, metavar="ID",
                        help="with --regrade: grade this student's notebook again, changed or not, and no other "
                        "notebook (repeat for several)")
    parser.add_argument("--shard", default=None, metavar="i/N",
                        help="grade only slice i (0 to N-1) of the class into --out, skipping students already "
                        "graded there with the same notebook; join the N folders with `harness grade merge`")
    parser.add_argument("--dask", default=None, metavar="ADDRESS",
                        help="grade on a Dask cluster: its scheduler's address (tcp://host:8786; the submissions, "
                        "--out and this repository at the same paths on every worker), or local:N for N local worker "
                        "processes (needs the optional extra: pip install .[cluster])")
    parser.add_argument("--timeout", type=int, default=120, help="per-cell timeout in seconds (default 120)")
    parser.add_argument("--submission-limit", type=int, default=900,
                        help="wall-clock limit for one submission in seconds (default 900)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="memory limit of each kernel in MiB (default 4096)")
    parser.add_argument("--max-output-kb", type=int, default=1000, help="output kept per cell in KiB (default 1000)")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="the instructor's grading secret (default: $HARNESS_GRADING_SECRET, else "
                        "~/.config/harness/grading-secret, created when missing)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run kernels without the sandbox (only where bubblewrap cannot run: submissions can then "
                        "read and write this machine's files)")


def run(args: argparse.Namespace) -> int:
    """Grade (a whole class or one shard), merge shard folders or regrade; print where everything is."""
    if args.regrade is not None:
        return run_regrade(args)
    if args.submissions and args.submissions[0] == "merge":
        folders = [Path(folder) for folder in args.submissions[1:]]
        return run_merge(folders, args.out, args)
    return run_grade(args)


def refuse_other_assignment(out: Path, assignment: str, force: bool) -> str | None:
    """Why grading `assignment` into `out` would overwrite another assignment's results (None: it would not)."""
    from harness.grading.regrade import read_record

    record = read_record(out)
    held = record["assignment"] if record else None
    if held is None and (out / "grades.csv").is_file():
        with (out / "grades.csv").open(encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        held = rows[0]["assignment"] if rows else None
    if held is None or held == assignment or force:
        return None
    return (f"{out} holds the grading of {held}: grade {assignment} into its own folder (the default is "
            f"{DEFAULT_OUT / assignment}), or add --force to replace it")


def run_grade(args: argparse.Namespace) -> int:
    """Grade, write the summary (or the shard's results), print where everything is."""
    from harness.grading.batch import RESULTS, Limits
    from harness.grading.late import course_file
    from harness.grading.regrade import read_record
    from harness.grading.shards import parse_shard
    from harness.grading.submissions import collect

    try:  # bad input: the message alone, before anything is created
        if not args.submissions:
            raise ValueError("give the folder or .zip of submissions, e.g. harness grade submissions/ --assignment "
                             "04_training_loop")
        if len(args.submissions) != 1:
            raise ValueError(f"one folder or .zip of submissions, got {len(args.submissions)}: "
                             f"{' '.join(args.submissions)} (to join shard folders: harness grade merge OUT...)")
        source = Path(args.submissions[0])
        if not args.assignment:
            raise ValueError("--assignment is required, e.g. --assignment 04_training_loop")
        assignment = check_assignment(args.assignment)
        if not source.exists():
            raise ValueError(f"{source} does not exist: give a folder of submissions or an LMS .zip export")
        if args.workers < 1:
            raise ValueError(f"--workers {args.workers}: use 1 or more grading processes")
        shard = parse_shard(args.shard) if args.shard else None
        dask_check(args.dask)
        if args.roster is not None and not args.roster.is_file():
            raise ValueError(f"--roster {args.roster} does not exist: give the class list as a CSV")
        course_file(args.course)  # a malformed course file stops here, not after the class is graded
        out = args.out or (DEFAULT_OUT / assignment / (f"shard-{shard[0]}-of-{shard[1]}" if shard else ""))
        if refusal := refuse_other_assignment(out, assignment, args.force):
            raise ValueError(refusal)
        if args.student:
            raise ValueError(f"--student regrades a student of a graded folder: harness grade --regrade OUT --student "
                             f"{args.student[0]}")
    except ValueError as error:
        print(f"cannot grade: {error}")
        return 2
    if not shard and (record := read_record(out)) and record["assignment"] == assignment and (out / RESULTS).is_dir():
        print(f"{out} already holds a grading of {assignment}: regrading it by content (changed checks judged again, "
              "new or changed notebooks graded again, nobody else); to grade everyone again, grade into an empty "
              "folder")
        return regrade_by_content(args, out.resolve(), record, source)
    secret = ready_to_grade(args)
    if secret is None:
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="harness-extract-") as tmp:
        try:
            submissions = collect(source, assignment, Path(tmp))
        except (OSError, ValueError) as error:  # a missing folder, a bad zip, two names for one student id
            print(f"cannot grade: {error}")
            return 2
        if not submissions:
            print(f"no submissions found in {source}")
            return 1
        limits = Limits(args.timeout, args.submission_limit, args.memory_mb, args.max_output_kb * 1024)
        with backend(args.dask, out):
            return _grade(args, submissions, assignment, out, shard, secret, limits, started)


def ready_to_grade(args: argparse.Namespace) -> bytes | None:
    """The instructor's secret, once the sandbox is known to work here (or `--no-sandbox` was asked for, with a
    warning); None, after saying why, when it cannot be made."""
    from harness.grading import sandbox
    from harness.judge.secret import load_or_create

    if args.no_sandbox:
        print("WARNING: grading without the sandbox (--no-sandbox): each submission's kernel runs as you, with your "
              "files and network; the judge still decides every point.")
    elif reason := sandbox.unavailable_reason():
        print(f"cannot grade: the kernel sandbox cannot be made here: {reason}")
        return None
    secret, where = load_or_create(args.secret_file)
    print(where)
    return secret


def dask_check(address: str | None) -> None:
    """Refuse a `--dask` address of the wrong form, or `--dask` without the optional extra installed.

    Raises:
        ValueError: saying the expected form, or what to install.
    """
    if address is None:
        return
    try:
        from harness.grading.cluster import parse_address
    except ImportError as error:
        raise ValueError(f"--dask needs the optional extra `cluster` (pip install .[cluster]): {error}") from None
    parse_address(address)


def backend(address: str | None, out: Path) -> AbstractContextManager[object]:
    """Where the jobs run: the Dask cluster at `address` (`cluster.on_dask`), or the local pool when None."""
    if address is None:
        return nullcontext()
    from harness.grading.cluster import on_dask

    print(f"grading on Dask: {address}")
    return on_dask(address, out)


def _grade(args: argparse.Namespace, submissions: list[Submission], assignment: str, out: Path,
           shard: tuple[int, int] | None, secret: bytes, limits: Limits, started: float) -> int:
    """Grade the whole class or one shard of it, print the results and where everything is."""
    from harness.grading.batch import grade_batch
    from harness.grading.progress import Progress
    from harness.grading.shards import grade_shard

    print(f"grading {len(submissions)} submissions of {assignment} into {out}: a line as each one ends")
    if shard:
        try:
            graded, skipped = grade_shard(submissions, assignment, out, shard, secret=secret, limits=limits,
                                          workers=args.workers, sandboxed=not args.no_sandbox, progress=Progress,
                                          source=Path(args.submissions[0]))
        except ValueError as error:  # the folder holds another grading's shard (ShardMismatch, ContractError)
            print(f"cannot grade: {error}")
            return 2
        _print_results([r.to_dict() for r in graded])
        print(f"\nshard {shard[0]}/{shard[1]}: {len(graded) + len(skipped)} of {len(submissions)} students; "
              f"{len(graded)} graded in {time.perf_counter() - started:.0f} s, {len(skipped)} already graded "
              f"with the same notebook (skipped).\n{'results':>18}: {out / 'results'}\nWhen every shard is done: "
              f"harness grade merge OUT_0 ... OUT_{shard[1] - 1} --out {DEFAULT_OUT}")
        return 0
    results = grade_batch(submissions, assignment, out, workers=args.workers, limits=limits, secret=secret,
                          sandboxed=not args.no_sandbox, progress=Progress)
    _print_results(results)
    print(f"\n{len(results)} submissions graded in {time.perf_counter() - started:.0f} s "
          f"{f'on Dask ({args.dask})' if args.dask else f'with {args.workers} workers'}.")
    return publish(results, out.resolve(), assignment, args, Path(args.submissions[0]))


def publish(results: list[dict[str, Any]], out: Path, assignment: str, args: argparse.Namespace,
            source: Path | None) -> int:
    """Write the summary, mistake report, grading record (with the submissions' `source`, None when unknown) and
    LMS files of `results` into `out`, the points there after the course file's late penalties (`late`); print
    where they are, how the students matched the roster, who was late and whose penalty moved since the last
    publish. 2 when the roster or the course file cannot be used, else 0."""
    from harness.grading import late, lms
    from harness.grading.feedback import write_late_notes
    from harness.grading.regrade import write_record
    from harness.grading.summary import max_points, task_ids, write_summary

    try:
        roster = lms.read_roster(args.roster) if args.roster else None
        columns = lms.assignment_columns(args.roster) if args.roster else None
    except (OSError, ValueError) as error:
        print(f"cannot read the roster: {error}")
        return 2
    try:
        course = late.course_file(args.course)
        lates = late.assess(results, course, assignment, *_class_ids(results, roster))
    except ValueError as error:
        print(f"cannot use the course file: {error}")
        return 2
    paths = write_summary(results, out, assignment, late.summary_section(lates, course))
    write_record(out, assignment, task_ids(results), source)
    matching = lms.match_roster(results, roster)
    if roster is not None:
        print("\n".join(matching.report()))
    names, said = lms.canvas_target(lms.Gradebooks(assignment, args.lms_title, args.canvas_assignment_id), columns)
    print(said)
    maximum = sum(max_points(results).values())
    lms_paths = lms.write_gradebooks(results, out, matching, names, maximum, lates)
    write_late_notes(out, assignment, {student: item.note(maximum) for student, item in lates.items()})
    archives = lms.write_feedback_archives(results, out, assignment)
    _print_late(lates, course, late.moved(out, lates))
    late.record(out, lates)
    _print_paths(paths, out)
    print(f"{'to upload':>18}: {lms_paths['canvas']} (Canvas: Grades > Import), {lms_paths['moodle']} (Moodle: "
          f"Upload grading worksheet), {lms_paths['generic']} (any other)")
    for archive in archives:
        print(f"{'feedback to upload':>18}: {archive}")
    return 0


def _class_ids(results: list[dict[str, Any]], roster: list[RosterEntry] | None) -> tuple[dict[str, set[str]],
                                                                                          set[str]]:
    """The ids an extension may name: each student's (student id, LMS user id, their roster entry's user id),
    and all of the class's (those and the `roster`'s user ids)."""
    from harness.grading.lms import match_roster

    entries = match_roster(results, roster).entries
    ids = {r["student"]: {r["student"], (r.get("lms") or {}).get("user_id", ""), entries[r["student"]].user_id} - {""}
           for r in results}
    return ids, set().union(*ids.values(), {entry.user_id for entry in roster or []}) - {""}


def _print_late(lates: dict[str, Late], course: Course, moved: list[str]) -> None:
    """A line per late or flagged student, the policy, and whose published points the policy moved."""
    flagged = [item.line() for item in lates.values() if item.days or item.flagged]
    if flagged or course.path:
        print(f"late policy ({course.path or 'no course file: lateness shown, not penalised'}): "
              f"{course.policy.describe()}")
    for line in flagged:
        print(f"  late: {line}")
    if moved:
        print("points moved by the late policy since the last publish (the course file changed):")
        print("\n".join(f"  {line}" for line in moved))


def run_merge(folders: list[Path], out: Path | None, args: argparse.Namespace) -> int:
    """Join shard folders into `out`; 1 when students are missing, 2 when the shards cannot be merged."""
    from harness.grading.merge import merge_shards
    from harness.grading.regrade import read_record
    from harness.grading.shards import read_manifest

    try:
        assignment = read_manifest(folders[0]).assignment if folders else ""
        out = out or DEFAULT_OUT / assignment
        if refusal := refuse_other_assignment(out, assignment, args.force):
            raise ValueError(refusal)
        merged = merge_shards(folders, out)
    except (OSError, ValueError) as error:  # not a shard folder, another grading or version, two results
        print(f"cannot merge: {error}")
        return 2
    results = [r.to_dict() for r in merged.results]
    _print_results(results)
    print(f"\n{len(results)} students of {merged.manifest.assignment} merged from {len(folders)} shard folders.")
    if merged.duplicates:
        print(f"graded in two shards with the same result, merged once: {', '.join(merged.duplicates)}")
    if merged.fresher:
        print(f"graded in two shards for different notebooks, the current notebook's result kept: "
              f"{', '.join(merged.fresher)}")
    if status := publish(results, out.resolve(), assignment, args, Path(merged.source) if merged.source else None):
        return status
    if merged.stale:
        print(f"notebook changed in {merged.source} since its shard graded it, grading again: "
              f"{', '.join(merged.stale)}")
        again = argparse.Namespace(**{**vars(args), "student": merged.stale})
        if status := regrade_by_content(again, out.resolve(), read_record(out.resolve()), Path(merged.source)):
            return status
    if merged.missing:
        print(f"\nMISSING: {sum(map(len, merged.missing.values()))} students have no result yet:")
        for shard, students in merged.missing.items():
            print(f"  shard {shard}: {', '.join(students)}")
        print("Run (or re-run) those shards, then merge again.")
        return 1
    return 0


def run_regrade(args: argparse.Namespace) -> int:
    """`--regrade OUT`: regrade the grading at OUT by content, from SUBMISSIONS if given, else from the folder it
    was graded from."""
    from harness.grading.batch import RESULTS
    from harness.grading.regrade import read_record

    out = args.regrade.resolve()
    record = read_record(out)
    if record is None or not (out / RESULTS).is_dir():
        print(f"cannot regrade: {out} holds no grading to regrade (no grading.json or {RESULTS}/): grade into it first "
              "with harness grade")
        return 2
    recorded = record.get("source")
    source = Path(args.submissions[0]) if args.submissions else Path(recorded) if recorded else None
    return regrade_by_content(args, out, record, source)


def regrade_by_content(args: argparse.Namespace, out: Path, record: dict[str, Any], source: Path | None) -> int:
    """Judge again the tasks whose check changed and grade again the new or changed notebooks of `source` (or the
    `--student`s) in the grading at `out`; print who moved and why, add it to regrade.md, publish the class."""
    from harness.grading.regrade import Change, Regrade, changed_tasks, rejudge, reruns
    from harness.grading.shards import read_results
    from harness.grading.submissions import collect

    assignment, asked = record["assignment"], set(args.student or [])
    graded, tasks = read_results(out), changed_tasks(record)
    done = [f"judged again from the stored observations (their check changed): {', '.join(tasks)}" if tasks else
            f"no check of {assignment} changed"]
    with tempfile.TemporaryDirectory(prefix="harness-extract-") as tmp:
        submissions = []
        if source is not None and source.exists():
            try:
                submissions = collect(source, assignment, Path(tmp))
            except (OSError, ValueError) as error:
                print(f"cannot regrade: {error}")
                return 2
        else:
            where = f"{source} does not exist" if source else "no folder of submissions is recorded"
            done.append(f"resubmissions not looked for: {where} (give it: harness grade SUBMISSIONS --regrade {out})")
        rerun = reruns(graded, submissions, asked)
        if missing := sorted(asked - rerun.keys()):
            print(f"cannot regrade: no submission of {', '.join(missing)} in "
                  f"{source or 'the submissions (none recorded: give them, harness grade SUBMISSIONS --regrade OUT)'}")
            return 2
        if not tasks and not rerun:
            unchanged = f"{'; '.join(done)}{f', and no notebook in {source} is new or changed' if submissions else ''}"
            if not _late_moved(args, out, graded, assignment):
                print(f"nothing to regrade in {out}: {unchanged}")
                return 0
            print(f"nothing to grade or judge again in {out} ({unchanged}); the late penalties changed: publishing")
            return publish([graded[student].to_dict() for student in sorted(graded)], out, assignment, args, source)
        secret = ready_to_grade(args) if rerun else b""
        if secret is None:
            return 2
        rejudged = rejudge(out, {student: r for student, r in graded.items() if student not in rerun}, tasks)
        changes = list(rejudged.changes)
        if rerun:
            done.append("graded again: " + ", ".join(f"{student} ({why})" for student, why in rerun.items()))
            again = _grade_again([s for s in submissions if s.student in rerun], assignment, out, secret, args)
            changes += [Change(r.student, graded.get(r.student), r, rerun[r.student]) for r in again]
    if rejudged.no_observations:
        done.append(f"no stored observations (graded before they were kept), left as they were: "
                    f"{', '.join(rejudged.no_observations)}")
    if unsubmitted := sorted(graded.keys() - {s.student for s in submissions}) if submissions else []:
        done.append(f"kept as graded, not in {source}: {', '.join(unsubmitted)}")
    results = graded | {change.student: change.after for change in changes}
    return _report_regrade(args, out, Regrade(assignment, source, results, changes, done))


def _late_moved(args: argparse.Namespace, out: Path, graded: dict[str, GradeResult], assignment: str) -> bool:
    """Whether publishing `graded` again would move someone's points by the late policy (the course file changed
    since `out` was last published); True when the course file or the roster cannot be used, for `publish` to say
    why."""
    from harness.grading import late
    from harness.grading.lms import read_roster

    results = [result.to_dict() for result in graded.values()]
    try:
        roster = read_roster(args.roster) if args.roster else None
        lates = late.assess(results, late.course_file(args.course), assignment, *_class_ids(results, roster))
    except (OSError, ValueError):
        return True
    first = not (out / late.RECORD).is_file()  # published before penalties were: any penalty is a move
    return bool(late.moved(out, lates)) or (first and any(item.percent for item in lates.values()))


def _grade_again(submissions: list[Submission], assignment: str, out: Path, secret: bytes,
                 args: argparse.Namespace) -> list[GradeResult]:
    """Grade `submissions` of `assignment` again into `out`, with the limits of `args`; their `GradeResult`s."""
    from harness.grading.batch import Limits, grade_batch
    from harness.grading.jobs import GradeResult
    from harness.grading.progress import Progress

    print(f"grading again {len(submissions)} of the class's submissions: a line as each one ends")
    limits = Limits(args.timeout, args.submission_limit, args.memory_mb, args.max_output_kb * 1024)
    with backend(args.dask, out):
        results = grade_batch(submissions, assignment, out, workers=args.workers, limits=limits, secret=secret,
                              sandboxed=not args.no_sandbox, progress=Progress)
    return [GradeResult(**result) for result in results]


def _report_regrade(args: argparse.Namespace, out: Path, regrade: Regrade) -> int:
    """Record the re-judged points in the gradebook and their feedback, print and add to regrade.md who moved
    (old -> new points, why), then publish the whole class (`publish`)."""
    from harness.grading.batch import course_template, merge_into_gradebook
    from harness.grading.mistakes import plural
    from harness.grading.regrade import CHECK_CHANGED, refresh_feedback, write_report

    rejudged = [change for change in regrade.changes if change.why == CHECK_CHANGED]
    problems = []
    if rejudged:
        with course_template(regrade.assignment) as (template, _):
            merge_into_gradebook(out / "gradebook.db", template, [change.after.to_dict() for change in rejudged])
            problems = refresh_feedback(out, template, regrade.assignment, rejudged)
    print("\n".join(regrade.done))
    print(f"{plural(len(regrade.changes), 'student')} redone (points before -> after, and why):" if regrade.changes
          else "no student's result moved")
    for change in regrade.changes:
        print(f"  {change.line()}")
    for problem in problems:
        print(f"{problem}: send this student the line above with the new grade")
    print(f"{'regrade diff':>18}: {write_report(out, regrade.changes, regrade.done)}")
    results = [regrade.results[student].to_dict() for student in sorted(regrade.results)]
    return publish(results, out, regrade.assignment, args, regrade.source)


def _print_results(results: list[dict[str, Any]]) -> None:
    for r in results:
        total = sum(score for score, _ in r["scores"].values())
        print(f"{r['student']:>24}  {r['status']:<8} {total:5.1f}  {'; '.join(r['reasons'])[:100]}")


def _print_paths(paths: dict[str, Path], out: Path) -> None:
    for name, path in paths.items():
        print(f"{name:>18}: {path}")
    print(f"{'feedback':>18}: {out / 'feedback'} (hidden tests removed: safe to return to students)")
    print(f"{'gradebook':>18}: {out / 'gradebook.db'}")
