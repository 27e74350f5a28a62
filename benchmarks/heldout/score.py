"""Figures of the held-out run: results.json (what the checks said) joined with verdicts.json (my reading).

verdicts.json maps an entry id to {"names_cause": bool, "why": str}, written by reading each message.
Usage: `.venv/bin/python benchmarks/heldout/score.py`.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    """Print caught %, caught with the actual cause %, the misses and the rejected correct answers."""
    results = json.loads((HERE / "results.json").read_text())
    verdicts = json.loads((HERE / "verdicts.json").read_text()) if (HERE / "verdicts.json").exists() else {}
    mistakes = [row for row in results if row["kind"] == "mistake"]
    correct = [row for row in results if row["kind"] == "correct"]
    timed_out = [row for row in mistakes if row["code"] == "timeout"]
    mistakes = [row for row in mistakes if row["code"] != "timeout"]
    caught = [row for row in mistakes if row["caught"]]
    named = [row for row in caught if verdicts.get(row["id"], {}).get("names_cause")]
    unjudged = [row["id"] for row in caught if row["id"] not in verdicts]
    rejected = [row for row in correct if not row["caught"]]
    print(f"mistakes: {len(mistakes)}, caught by the visible check: {len(caught)} "
          f"({100 * len(caught) / len(mistakes):.1f}%), with the actual cause: {len(named)} "
          f"({100 * len(named) / len(mistakes):.1f}%)")
    print(f"correct answers: {len(correct)}, rejected: {len(rejected)}")
    print(f"timed out (no answer within 60 s, left out of the figures): {[row['id'] for row in timed_out]}")
    if unjudged:
        print(f"not judged yet: {len(unjudged)}: {' '.join(unjudged)}")
    print("\nmisses (the visible check passed a mistake):")
    for row in mistakes:
        if not row["caught"]:
            print(f"- {row['id']} {row['task']}: {row['story']} (cause: {row['cause']})")
    print("\ncaught without the actual cause:")
    for row in caught:
        verdict = verdicts.get(row["id"])
        if verdict and not verdict["names_cause"]:
            print(f"- {row['id']} {row['task']}: {row['story']} -> [{row['code']}] {verdict['why']}")
    print("\nrejected correct answers:")
    for row in rejected:
        message = " ".join(row["message"][:300].split())
        print(f"- {row['id']} {row['task']}: {row['story']} -> [{row['code']}] {message}")


if __name__ == "__main__":
    main()
