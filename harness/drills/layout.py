"""Drill text that fits the terminal (80 columns at least), never broken inside a word (a path longer than a line
keeps a line of its own).

- `fit_prose`: prompts, options, hints, failure messages and debriefs. A long line is wrapped at words with a
  hanging indent: under the text of an option (`  (a) `), of a message's field (`  Observed:      `) or of a
  list item; an indented line with no such label is code, broken as `fit_code` breaks it, and wrapped at
  spaces as text where no such break can shorten it (code shown for reading, as an experiment's).
- `fit_code`: solutions. A long line is broken where Python allows it (between tokens inside brackets, a string
  inside brackets cut in two adjacent literals, a continuation line brought back left, inside a comment or a
  triple-quoted string, with a backslash elsewhere), and the result must parse to the same code (a docstring's
  line breaks aside): a line no such break can shorten is left as it is.
- `fit_output`: what an answer printed, cut at the width (it is not ours to reflow).
- `clip`: one line of a table, cut at a word with an ellipsis.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import textwrap
import tokenize

MIN_WIDTH = 80
_LABEL = re.compile(r"^(\s*)(\([a-d]\) |[-*] |\d+\. |[A-Z][A-Za-z' ]{0,24}: +)")
_TRIPLE = re.compile(r"^[rRbBuUfF]*('''|\"\"\")")


def width() -> int:
    """The terminal's width, 80 columns at least (80 when the output is not a terminal)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((MIN_WIDTH, 24)).columns)


def fit_prose(text: str, columns: int | None = None) -> str:
    """`text` with every line longer than `columns` (default: `width()`) wrapped at words, with a hanging
    indent under its label; indented lines without a label are code (`fit_code`)."""
    columns = columns or width()
    lines: list[str] = []
    code: list[str] = []
    for line in text.splitlines():
        label = _LABEL.match(line)
        if line.startswith(" ") and not label:
            code.append(line)
            continue
        if code:
            lines += _wrapped_code(code, columns)
            code = []
        if len(line) <= columns:
            lines.append(line)
            continue
        hang = " " * len(label.group(0)) if label else ""
        lines += textwrap.wrap(line, columns, subsequent_indent=hang, break_long_words=False,
                               break_on_hyphens=False) or [line]
    if code:
        lines += _wrapped_code(code, columns)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _wrapped_code(code: list[str], columns: int) -> list[str]:
    """Code lines broken as `fit_code` breaks them, then any still too long wrapped at spaces (for reading)."""
    return [piece for line in fit_code("\n".join(code), columns).splitlines() for piece in _as_text(line, columns)]


def _as_text(line: str, columns: int) -> list[str]:
    """An indented line wrapped at spaces with an 8-space hanging indent; one word alone (a path) is kept whole."""
    indent = " " * (len(line) - len(line.lstrip()))
    if len(line) <= columns or " " not in line.strip():
        return [line]
    return textwrap.wrap(line.lstrip(), columns, initial_indent=indent, subsequent_indent=indent + " " * 8,
                         break_long_words=False, break_on_hyphens=False)


def fit_output(text: str, columns: int | None = None) -> str:
    """What an answer printed, each line cut into pieces of at most `columns` characters."""
    columns = columns or width()
    return "\n".join(piece for line in text.splitlines()
                     for piece in ([line[i:i + columns] for i in range(0, len(line), columns)] or [""]))


def clip(line: str, columns: int) -> str:
    """`line` if it fits in `columns`, else cut at the last word that fits, with an ellipsis."""
    if len(line) <= columns:
        return line
    cut = line[:columns - 1].rsplit(" ", 1)[0] if " " in line[:columns - 1] else line[:columns - 1]
    return cut.rstrip(" ,;:") + "…"


def fit_code(source: str, columns: int | None = None) -> str:
    """`source` with each line longer than `columns` broken where Python allows it; the result parses (to the
    same code, up to the text of a docstring) whenever `source` did. Unparsable snippets are wrapped at
    spaces with an 8-space hanging indent."""
    columns = columns or width()
    lines = source.splitlines()
    if all(len(line) <= columns for line in lines):
        return source
    dedented = textwrap.dedent(source)
    margin = len(lines[0]) - len(dedented.splitlines()[0]) if lines and dedented else 0
    try:
        ast.parse(dedented)
        breaks, leads = _break_points(dedented)
    except (SyntaxError, tokenize.TokenError, IndentationError):
        return "\n".join(piece for line in lines for piece in _as_text(line, columns)) + \
            ("\n" if source.endswith("\n") else "")
    out: list[str] = []
    for number, line in enumerate(dedented.splitlines(), 1):
        points = breaks.get(number, [])
        shift = len(line) - len(line.lstrip()) - leads.get(number, len(line))
        if len(line) + margin > columns and shift > 0:  # a continuation line indented far right: brought back
            line, points = line[shift:], [(column - shift, kind, prefix) for column, kind, prefix in points]
        pieces = _split(line, points, columns - margin) if len(line) + margin > columns else [line]
        out += [" " * margin + piece if piece else piece for piece in pieces]
    fitted = "\n".join(out) + ("\n" if source.endswith("\n") else "")
    try:
        same = _meaning(textwrap.dedent(fitted)) == _meaning(dedented)
    except SyntaxError:
        same = False
    return fitted if same else source


def _meaning(source: str) -> str:
    """The code `source` parses to, every string's whitespace runs made one space (a docstring broken in two
    lines means the same)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = " ".join(node.value.split())
    return ast.dump(tree)


def _break_points(source: str) -> tuple[dict[int, list[tuple[int, str, str]]], dict[int, int]]:
    """Per line number, where a line may be broken: (column the next piece starts at, kind, the next piece's
    prefix). Kinds: "open" (inside brackets), "string" (a triple-quoted string), "comment", "joined" (needs a
    backslash). And per line that starts inside brackets, the indent it may have instead of its own (its
    statement's first line's, plus 8)."""
    lines = source.splitlines()
    points: dict[int, list[tuple[int, str, str]]] = {}
    leads: dict[int, int] = {}
    depth, previous, previous_text, statement = 0, (0, 0), "", 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind, text, (row, col), end = token.type, token.string, token.start, token.end
        if kind in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            previous, previous_text = end, ""
            continue
        indent = " " * (len(lines[row - 1]) - len(lines[row - 1].lstrip()) + 8)
        if depth and previous[0] != row:
            leads[row] = len(lines[statement - 1]) - len(lines[statement - 1].lstrip()) + 8
        spaced = previous[0] == row and col > previous[1]
        joinable = previous[0] == row and (previous_text in ("(", "[", "{", ",") or text == ".")
        if spaced or (depth and joinable):
            points.setdefault(row, []).append((col, "open" if depth else "joined", indent))
        if kind == tokenize.COMMENT:
            hang = " " * min(col, len(indent) - 8) + "# "  # a comment far right goes on under its line's code
            points.setdefault(row, []).extend((col + i + 1, "comment", hang)
                                              for i, char in enumerate(text) if char == " " and i > 1)
        elif kind == tokenize.STRING and _TRIPLE.match(text):
            for offset, part in enumerate(text.split("\n")):
                line = lines[row + offset - 1]
                start = col + len(_TRIPLE.match(text).group(0)) if offset == 0 else 0
                margin = " " * (len(line) - len(line.lstrip()))
                points.setdefault(row + offset, []).extend(
                    ((col if offset == 0 else 0) + i + 1, "string", margin)
                    for i, char in enumerate(part) if char == " " and (col if offset == 0 else 0) + i >= start)
        elif kind == tokenize.STRING and depth and "\n" not in text:
            points.setdefault(row, []).extend(_literal_points(text, col, indent))
        elif kind == tokenize.OP and text in "([{":
            statement = statement if depth else row
            depth += 1
        elif kind == tokenize.OP and text in ")]}":
            depth -= 1
        previous, previous_text = end, text
    return points, leads


def _literal_points(text: str, col: int, indent: str) -> list[tuple[int, str, str]]:
    """Where a one-line string literal inside brackets may be cut in two adjacent literals (same value): at a
    space outside any f-string replacement field. The kind carries the quote that closes the first piece."""
    opening = re.match(r"^[rRbBuUfF]*['\"]", text)
    if opening is None:
        return []
    quote, fields, points = opening.group(0)[-1], 0, []
    for i, char in enumerate(text[len(opening.group(0)):-1], len(opening.group(0))):
        fields += (char == "{") - (char == "}") if "f" in opening.group(0).lower() else 0
        if char == " " and not fields and text[i - 1] != "\\":
            points.append((col + i + 1, f"literal{quote}", indent + opening.group(0)))
        elif char == "{" and fields == 1 and i > len(opening.group(0)):  # before a replacement field
            points.append((col + i, f"literal{quote}", indent + opening.group(0)))
    return points


def _fits(line: str, point: tuple[int, str, str], start: int, prefix: str, columns: int) -> bool:
    """Whether the piece of `line` from `start` to `point` (with its prefix and closing) fits in `columns`."""
    column, kind, _ = point
    literal = kind.startswith("literal")
    piece = line[start:column] if literal else line[start:column].rstrip()
    closing = 2 if kind == "joined" else 1 if literal else 0
    return column > start and bool(piece.strip()) and len(prefix) + len(piece) + closing <= columns


def _split(line: str, points: list[tuple[int, str, str]], columns: int) -> list[str]:
    """`line` broken at the last allowed point that fits, again and again; a backslash only where nothing
    else fits."""
    pieces: list[str] = []
    start, prefix = 0, ""
    while len(prefix) + len(line) - start > columns:
        usable = [p for p in points if _fits(line, p, start, prefix, columns)]
        best = [p for p in usable if p[1] != "joined"] or usable
        if not best:
            break
        column, kind, following = max(best)
        closing = " \\" if kind == "joined" else kind[len("literal"):] if kind.startswith("literal") else ""
        kept = line[start:column] if kind.startswith("literal") else line[start:column].rstrip()
        pieces.append(prefix + kept + closing)
        start, prefix = column, following
        while start < len(line) and line[start] == " " and kind in ("open", "joined", "comment"):
            start += 1
    pieces.append(prefix + line[start:])
    return pieces
