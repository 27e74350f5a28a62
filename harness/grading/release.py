"""The student release: `notebooks/` generated from `solutions/` by nbgrader's GenerateAssignment.

Generation runs in a temporary course directory with its own gradebook, so nothing but the release
notebooks ever lands in the repository. `release_differences` regenerates into a temporary directory and
compares with the committed notebooks: the pipeline test uses it to catch a release nobody regenerated.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from harness.grading.alembic_head import use_known_alembic_head
from harness.grading.layout import (
    REPO_ROOT,
    check_assignment,
    course_config,
    discover_assignments,
    put_environment_tools_on_path,
)


class ReleaseError(RuntimeError):
    """nbgrader could not generate an assignment's release."""


def build_course(course_root: Path, assignments: list[str], repo_root: Path = REPO_ROOT) -> None:
    """Copy the assignments' sources into `course_root` and run GenerateAssignment on each.

    Leaves `course_root`/gradebook.db (the assignments and their graded cells) and
    `course_root`/notebooks/<assignment>/ (the releases), the starting point of every grading job.
    """
    from nbgrader.apps import NbGraderAPI

    put_environment_tools_on_path()
    use_known_alembic_head()
    for assignment in assignments:
        shutil.copytree(repo_root / "solutions" / assignment, course_root / "solutions" / assignment,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    api = NbGraderAPI(config=course_config(course_root, repo_root))
    for assignment in assignments:
        outcome = api.generate_assignment(assignment, force=True, create=True)
        if not outcome["success"]:
            details = f"{outcome.get('error')}\n{outcome.get('log', '')}"
            raise ReleaseError(f"nbgrader could not generate {assignment}:\n{details}")


def generate_release(assignments: list[str], out_dir: Path, repo_root: Path = REPO_ROOT) -> list[Path]:
    """Generate the releases of `assignments` into `out_dir`/<assignment>/ and return the notebooks written."""
    written = []
    with tempfile.TemporaryDirectory(prefix="harness-release-") as tmp:
        course_root = Path(tmp)
        build_course(course_root, assignments, repo_root)
        for assignment in assignments:
            target = out_dir / assignment
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(course_root / "notebooks" / assignment, target)
            written += sorted(target.glob("*.ipynb"))
    return written


def normalised(path: Path) -> dict:
    """A release notebook's JSON, for comparison.

    GenerateAssignment is deterministic here (cell ids, checksums and metadata come from the source),
    so nothing is dropped: the notebook is only parsed, which ignores formatting differences.
    """
    return json.loads(path.read_text(encoding="utf-8"))


def release_differences(assignment: str, repo_root: Path = REPO_ROOT) -> list[str]:
    """What differs between a fresh release of `assignment` and the committed `notebooks/` (empty: none)."""
    committed_dir = repo_root / "notebooks" / assignment
    with tempfile.TemporaryDirectory(prefix="harness-release-check-") as tmp:
        fresh = generate_release([assignment], Path(tmp), repo_root)
        problems = []
        for notebook in fresh:
            committed = committed_dir / notebook.name
            if not committed.exists():
                problems.append(f"{committed} is missing")
                continue
            new, old = normalised(notebook), normalised(committed)
            if new["metadata"] != old["metadata"]:
                problems.append(f"{committed}: notebook metadata differ")
            if len(new["cells"]) != len(old["cells"]):
                problems.append(f"{committed}: {len(old['cells'])} cells committed, {len(new['cells'])} generated")
            # a differing cell count is reported above; compare the cells both notebooks have
            for index, (a, b) in enumerate(zip(new["cells"], old["cells"], strict=False)):
                if a != b:
                    problems.append(f"{committed}: cell {index} ({b.get('id')}) differs from the generated one")
        extra = {p.name for p in committed_dir.glob("*.ipynb")} - {p.name for p in fresh}
        problems += [f"{committed_dir / name} has no source in solutions/" for name in sorted(extra)]
    return [f"{p} (run `make release` and commit notebooks/)" for p in problems]


def answered_release(assignment: str, replace: dict[str, str] | None = None, repo_root: Path = REPO_ROOT):
    """The committed release with every solution cell answered by the solution's code (markers removed).

    `replace` maps task ids to other code for their `<task>-code` cell: a planted bug. This is what a student
    with every answer right (or all but one) submits: `harness course` grades it, and so do the tests.
    """
    import nbformat

    release = nbformat.read(repo_root / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
    source = nbformat.read(repo_root / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for task, code in (replace or {}).items():
        if f"{task}-code" not in answers:
            raise KeyError(f"{assignment} has no solution cell {task}-code to replace")
        answers[f"{task}-code"] = code
    for cell in release.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = "\n".join(line for line in answers[grade_id].splitlines() if "### " not in line)
    return release


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `harness release`."""
    parser.add_argument("assignments", nargs="*", help="assignments to release (default: every one in solutions/)")
    parser.add_argument("--check", action="store_true",
                        help="do not write: exit 1 if the committed notebooks/ differ from a fresh release")
    parser.add_argument("--student", type=Path, metavar="DIR",
                        help="write the student course (released notebooks, harness without the judge, README) into "
                        "DIR, a new folder, instead of regenerating notebooks/")
    parser.add_argument("--course", type=Path, metavar="FILE",
                        help="with --student: the course file whose solution_hints and due dates say which level-3 "
                        "hints (solution lines) the tree carries (default ./course.toml when present)")
    parser.add_argument("--practice", action="store_true",
                        help="with --student: a practice release, carrying every level-3 hint (solution line) and "
                        "every drill's answer")
    parser.add_argument("--no-audit", action="store_true",
                        help="with --student: skip the answerability audit (harness.grading.answerability), which "
                        "tries what the tree ships as each exercise's answer and fails the release on an undeclared "
                        "hit; the summary then says the tree was not audited")


def _student(args: argparse.Namespace) -> int:
    """Write the student tree, audit it for answers it ships (unless --no-audit) and say what it holds."""
    from harness.drills.lesson import NOTEBOOK_DRILLS
    from harness.grading.answerability import audit, stale, summary, undeclared
    from harness.grading.answerable import WITHHELD_DRILLS
    from harness.grading.late import course_file
    from harness.grading.solution_hints import released_lines
    from harness.grading.student_tree import write_student_tree

    assignments = discover_assignments()
    lines = released_lines(assignments, course_file(args.course), datetime.now(UTC), args.practice)
    withheld = () if args.practice else WITHHELD_DRILLS
    files = write_student_tree(args.student, solution_lines=lines, withheld_drills=withheld)
    opened = f"lessons {', '.join(sorted({task[:2] for task in lines}))}" if lines else "no lesson"
    whole = len(set(withheld) - {drill for _, drill in NOTEBOOK_DRILLS})  # the rest stay for lesson 11's checks
    print(f"wrote the student course ({len(files)} files) into {args.student}: hand it out by git, a zip, "
          "nbgitpuller or nbgrader's exchange; it holds no solution notebook, hidden test or grading secret, no "
          "body of a judge's reference that answers an exercise (what each returned on its visible case instead), "
          f"the level-3 hints (solution lines) of {opened} (the course file's solution_hints, or --practice), and the "
          f"answers of every drill but {len(withheld)} that answer graded exercises, {whole} of them held whole "
          "(prompt and starter too) (--practice: all of them)")
    if args.no_audit:
        print("not audited for answerability (--no-audit): what the tree ships may answer exercises")
        return 0
    result = audit(args.student)
    problems = undeclared(result) + stale(result)
    print(f"answerability audit: {summary(result)}")
    for problem in problems:
        print(problem)
    unaudited = sorted(result.unaudited)
    if unaudited:
        print(f"the audit could not try {', '.join(unaudited)} (why: above, after 'not audited'), and a release needs "
              "every exercise audited: where the solution does not pass its check in the tree, run the release with "
              "the course's environment (.venv/bin/harness); or give --no-audit to hand out a tree nobody audited")
    return 1 if problems or unaudited else 0


def run(args: argparse.Namespace) -> int:
    """Regenerate notebooks/ from solutions/ (or, with --check, compare them; with --student, write the
    student tree)."""
    if (args.course or args.practice or args.no_audit) and not args.student:
        print("--course, --practice and --no-audit are about a student tree: give them with --student DIR")
        return 2
    if args.student:
        return _student(args)
    assignments = [check_assignment(a) for a in args.assignments] or discover_assignments()
    if args.check:
        problems = [p for a in assignments for p in release_differences(a)]
        print("\n".join(problems) or f"notebooks/ is up to date for {', '.join(assignments)}")
        return 1 if problems else 0
    for path in generate_release(assignments, REPO_ROOT / "notebooks"):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0
