"""Spaced repetition that means it: one grading per drill per day, hints and revealed solutions lower a review,
every attempt and hint is in the history, and the first progress format still loads."""

import datetime as dt
import json

import pytest

from harness.drills.progress import INTERVAL_DAYS, Progress

DAY = dt.date(2026, 11, 24)


@pytest.fixture
def progress(tmp_path):
    return Progress.load(tmp_path / "progress.json")


def test_a_clean_pass_promotes_once_a_day_however_often_the_file_is_rechecked(progress):
    for _ in range(4):
        record = progress.record("d", True, DAY)
    assert (record.box, record.due) == (1, (DAY + dt.timedelta(days=INTERVAL_DAYS[1])).isoformat())
    record = progress.record("d", True, DAY + dt.timedelta(days=1))
    assert record.box == 2


def test_a_failure_sends_the_drill_back_to_box_zero_due_today(progress):
    progress.record("d", True, DAY)
    record = progress.record("d", False, DAY + dt.timedelta(days=1))
    assert (record.box, record.due) == (0, (DAY + dt.timedelta(days=1)).isoformat())


def test_a_pass_after_a_hint_keeps_the_box_and_comes_back_tomorrow(progress):
    progress.record("d", True, DAY)
    later = DAY + dt.timedelta(days=1)
    assert progress.hint("d", available=2) == 1
    record = progress.record("d", True, later)
    assert (record.box, record.due) == (1, (later + dt.timedelta(days=1)).isoformat())
    assert record.hints_seen == 0  # the review is over: the next one starts without hints


def test_a_pass_after_the_solution_was_revealed_counts_as_not_known(progress):
    for day in range(3):
        progress.record("d", True, DAY + dt.timedelta(days=day))
    later = DAY + dt.timedelta(days=5)
    progress.reveal("d", later)
    record = progress.record("d", True, later)
    assert (record.box, record.due) == (0, (later + dt.timedelta(days=1)).isoformat())


def test_hints_never_go_past_the_last_level(progress):
    assert [progress.hint("d", available=2) for _ in range(4)] == [1, 2, 2, 2]


def test_history_and_mocks_are_saved_and_reloaded(progress):
    number = progress.start_mock(["a", "b"], 30.0)
    progress.hint("a", 2, mock=number)
    progress.record("a", False, DAY, code="wrong-value", mock=number)
    progress.record("a", True, DAY, code="passed", mock=number)
    progress.mocks[number - 1]["passed"].append("a")  # what record_verdict does for a pass in a mock
    progress.end_mock(number, {"a": 61.23, "b": 5.0}, "quit")
    progress.save()
    again = Progress.load(progress.path)
    events = [(e["event"], e.get("code"), e["mock"]) for e in again.history]
    assert events == [("hint", None, 1), ("check", "wrong-value", 1), ("check", "passed", 1)]
    assert again.mocks[0] | {"started": "", "deadline": 0} == {"number": 1, "started": "", "deadline": 0,
                                                              "minutes": 30.0, "drills": ["a", "b"],
                                                "passed": ["a"], "seconds": {"a": 61.2, "b": 5.0}, "ended": "quit"}


def test_the_first_progress_format_still_loads(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"d": {"box": 3, "due": "2026-11-20", "attempts": 5, "passes": 4, "hints_seen": 1,
                                      "last_result": "pass"}}))
    progress = Progress.load(path)
    assert progress.records["d"].box == 3 and progress.is_due("d", DAY)
    progress.save()
    assert Progress.load(path).records["d"].attempts == 5


def test_a_file_that_is_not_progress_is_reported_and_set_aside_at_the_next_save(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text("[1, 2]")
    progress = Progress.load(path)
    assert "cannot be read as drill progress" in progress.problem and "starts afresh" in progress.problem
    progress.hint("d", 2)
    progress.save()
    assert [p.read_text() for p in tmp_path.glob("progress.json.damaged-*")] == ["[1, 2]"]
    assert Progress.load(path).history[0]["event"] == "hint"


def _mock(tmp_path, minutes):
    progress = Progress.load(tmp_path / "progress.json")
    number = progress.start_mock(["d"], minutes)
    progress.save()
    return number


def test_a_mock_check_after_time_is_up_does_not_count(tmp_path):
    from harness.drills.progress import record_verdict

    number = _mock(tmp_path, minutes=0)
    note = record_verdict("d", {"passed": True, "code": "passed"}, mock=number, path=tmp_path / "progress.json").note
    progress = Progress.load(tmp_path / "progress.json")
    assert note.startswith("time is up") and progress.mocks[0]["passed"] == [] and "d" not in progress.records


def test_a_mock_pass_after_the_debrief_does_not_count(tmp_path):
    from harness.drills.progress import record_verdict

    number = _mock(tmp_path, minutes=30)
    path = tmp_path / "progress.json"
    record_verdict("d", {"passed": False, "code": "wrong-choice", "debrief": "why"}, mock=number, path=path)
    note = record_verdict("d", {"passed": True, "code": "passed", "debrief": "why"}, mock=number, path=path).note
    progress = Progress.load(path)
    assert "debrief" in note and progress.mocks[0]["passed"] == [] and progress.records["d"].box == 0


def test_a_record_written_outside_the_checker_is_marked_unverified(tmp_path):
    from harness.drills.progress import record_verdict

    path = tmp_path / "progress.json"
    record_verdict("d", {"passed": False, "code": "wrong-value"}, path=path)
    assert Progress.load(path).unverified == set()
    raw = json.loads(path.read_text())
    raw["records"]["d"].update(box=5, passes=9)  # a forged promotion
    path.write_text(json.dumps(raw))
    assert Progress.load(path).unverified == {"record:d"}


def test_a_self_check_drills_pass_does_not_count_in_a_mock_score(tmp_path):
    from harness.drills.cli import _mock_summary
    from harness.drills.progress import record_verdict

    path = tmp_path / "progress.json"
    progress = Progress.load(path)
    number = progress.start_mock(["debugging-grad-norms", "loop-train-step"], 30)
    progress.save()
    note = record_verdict("debugging-grad-norms", {"passed": True, "code": "passed"}, mock=number, path=path).note
    assert "self-check" in note
    assert record_verdict("loop-train-step", {"passed": True, "code": "passed"}, mock=number, path=path).note == ""
    progress = Progress.load(path)
    assert progress.mocks[0]["passed"] == ["loop-train-step"]
    assert progress.records["debugging-grad-norms"].box == 1  # still practice: the record counts the pass
    progress.end_mock(number, {}, "finished")
    summary = _mock_summary(progress, number)
    assert "1/1 passed" in summary and "self  debugging-grad-norms" in summary
