"""Feedback pages that run nothing of the student's: outputs as text, sanitised Markdown, a content security policy.

A feedback page is nbconvert's HTML of the autograded notebook, and the student wrote much of that notebook:
Markdown cells (raw HTML passes through Markdown), and outputs of every MIME type (`text/html`,
`application/javascript`, SVG). Three layers keep a page inert:

- `OutputsAsText` (a preprocessor of GenerateFeedback) keeps of each displayed output only its plain text and
  its PNG or JPEG image; an output with neither shows its source as plain text, so a `<script>` reads as text;
- `EXPORTER` turns on nbconvert's `sanitize_html` (no JavaScript or widget output is written) with `clean_html`
  as its cleaner, and renders Markdown through `markdown_html` (nbgrader's feedback template renders Markdown
  cells without nbconvert's cleaning): each Markdown cell and each remaining HTML fragment keeps a small set of
  tags and attributes (no `style`, `id`, event handler or layout class; `<script>`, `<style>`, forms and
  frames are shown as escaped text; links only `http`, `https`, `mailto` or within the page), balanced within
  its own cell;
- `with_policy` removes the page's scripts and puts a Content-Security-Policy first in its head: no script,
  no inline style but the page's own (by hash), images only as `data:` URIs, nothing fetched.

The score (nbgrader's template writes it in the page's heading) comes before any cell of the notebook.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from typing import Any

import bleach
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

SHOWN_AS_DATA = ("text/plain", "image/png", "image/jpeg")  # what a displayed output keeps
TAGS = frozenset({"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
                  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "small",
                  "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
                  "ul"})
ATTRIBUTES = {"*": ["class", "title"], "a": ["href", "name", "title"], "img": ["src", "alt", "width", "height"],
              "td": ["colspan", "rowspan", "align"], "th": ["colspan", "rowspan", "align"]}
NONE = "'none'"
POLICY = 'http-equiv="Content-Security-Policy"'
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
_SCRIPT = re.compile(r"<script\b.*?</script\s*>\s*", re.I | re.S)
_STYLE = re.compile(r"<style\b[^>]*>(.*?)</style\s*>", re.I | re.S)
_HEAD = re.compile(r"<head\b[^>]*>", re.I)
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif);base64,[a-z0-9+/=]*$")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):")
# the classes Markdown rendering gives (heading anchors, highlighted code): none of the page's layout classes
_CLASS = re.compile(r"anchor-link|highlight|hl-[a-z0-9]+|[a-z][a-z0-9]{0,2}")


def _allowed(tag: str, name: str, value: str) -> bool:
    """Whether an attribute survives: those of `ATTRIBUTES`; classes of `_CLASS` only (no class can place an
    element over the score); a link to `http`, `https`, `mailto` or within the page; an image's source a PNG,
    JPEG or GIF `data:` URI or a relative path."""
    if name not in ATTRIBUTES.get(tag, []) + ATTRIBUTES["*"]:
        return False
    if name == "class":
        return all(_CLASS.fullmatch(token) for token in value.split())
    if name not in ("href", "src"):
        return True
    normalized = re.sub(r"[`\x00-\x20\x7f-\xa0\s]+", "", html.unescape(value)).lower()
    scheme = _SCHEME.match(normalized)
    if tag == "img":
        return scheme is None or bool(_DATA_IMAGE.match(normalized))
    return scheme is None or scheme.group(1) in ("http", "https", "mailto")


def clean_html(fragment: Any) -> str:
    """One cell's HTML with only `TAGS` and their harmless attributes; any other tag shown as escaped text."""
    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    return bleach.clean(text, tags=TAGS, attributes=_allowed, protocols=PROTOCOLS, strip=False)


def markdown_html(source: str) -> str:
    """A Markdown cell as cleaned HTML (`clean_html`); attachments are not shown."""
    return clean_html(markdown2html_mistune(source))


# HTMLExporter's configuration for feedback pages
EXPORTER = {"sanitize_html": True, "filters": {"clean_html": clean_html, "markdown2html": markdown_html}}


class OutputsAsText(NbGraderPreprocessor):
    """Keep of each displayed output only `SHOWN_AS_DATA`; an output with none of them shows its data as text."""

    def preprocess_cell(self, cell: NotebookNode, resources: Any, index: int) -> tuple[NotebookNode, Any]:
        """Rewrite the displayed outputs of one code cell."""
        for output in cell.get("outputs", []):
            if output.get("output_type") not in ("display_data", "execute_result"):
                continue
            data = output.get("data", {})
            kept = {mime: value for mime, value in data.items() if mime in SHOWN_AS_DATA}
            if "text/plain" not in kept and not kept and data:
                mime, value = next(iter(data.items()))
                kept["text/plain"] = f"[{mime} output, shown as text]\n{value if isinstance(value, str) else ''}"
            output["data"] = NotebookNode(kept)
            output["metadata"] = NotebookNode()
        return cell, resources


def with_policy(page: str) -> str:
    """`page` with its scripts removed and a Content-Security-Policy first in its head: scripts, objects, frames
    and fetches forbidden, styles only the head's own (`<style>` blocks, by hash), images only `data:` URIs."""
    page = _SCRIPT.sub("", page)
    match = _HEAD.search(page)
    if match is None:
        raise ValueError("a feedback page without <head>: the policy has nowhere to go")
    head = page[match.end():page.find("</head>", match.end())]
    if POLICY in head:  # polished before
        return page
    hashes = [f"'sha256-{base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()}'"
              for style in _STYLE.findall(head)]
    policy = ("default-src 'none'; script-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; "
              f"img-src data:; style-src {' '.join(hashes) or NONE}")
    meta = f'\n<meta {POLICY} content="{policy}">'
    return page[:match.end()] + meta + page[match.end():]
