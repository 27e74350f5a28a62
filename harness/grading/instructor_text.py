"""What text from a submission becomes in the instructor's files: capped, CSV cells inert, Markdown escaped.

Student ids, LMS names, file names in notes and the judge's messages can all carry a student's text. Every
CSV the grader writes goes through `csv_writer` (a cell that begins with `=`, `+`, `-`, `@`, a tab or a
carriage return is a formula to a spreadsheet: it gets a leading `'` and is read as text); every table cell
or list item of `summary.md` and `mistakes.md` that holds such text goes through `markdown_text` (or
`markdown_code` for a code); `capped` bounds one message.
"""

from __future__ import annotations

import csv
import html
import re
from collections.abc import Iterable
from typing import Any

MESSAGE_CHARS = 4000  # one message, reason or note (a few kB)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CODE = re.compile(r"[\w][\w .-]{0,79}")
_MARKDOWN = re.compile(r"([\\`|*_\[\]])")


def capped(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text`, cut at `limit` characters with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters cut by the grader]"


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet reads as data: a string that begins like a formula gets a leading `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


class _InertWriter:
    """A `csv.writer` whose string cells pass through `csv_cell`."""

    def __init__(self, handle: Any) -> None:
        self._writer = csv.writer(handle)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([csv_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def csv_writer(handle: Any) -> _InertWriter:
    """The writer every CSV of the grader uses: `csv.writer(handle)` with formula-like cells neutralised."""
    return _InertWriter(handle)


def markdown_text(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` as literal Markdown inside a table cell or a list item: capped, on one line, HTML escaped, and
    the characters that make code, tables, emphasis and links escaped."""
    one_line = " ".join(capped(str(text), limit).splitlines())
    return _MARKDOWN.sub(r"\\\1", html.escape(one_line, quote=False))


def markdown_code(text: str) -> str:
    """A code (a failure code, a task id) as a Markdown code span; anything that is not a plain code is shown
    as escaped text instead (a backtick would end the span)."""
    return f"`{text}`" if _CODE.fullmatch(text) else markdown_text(text, 200)
