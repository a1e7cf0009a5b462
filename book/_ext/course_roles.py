"""The course's own MyST roles.

``{quoted}`0.75``` marks a figure in the prose that no cell of the page computes: one quoted from a
paper, a lecture or another run (a setting the text names, such as Kneser-Ney's usual discount, is
quoted too). It renders as ``<span class="quoted">0.75</span>``, so the built-book test can tell
quoted figures from typed ones; every other figure in the prose is glued from the cell that
computes it (MyST-NB's ``glue`` in the cell, ``{glue:text}`` in the text).
"""

from __future__ import annotations

from docutils import nodes


def quoted_role(name, rawtext, text, lineno, inliner, options=None, content=None):  # noqa: ANN001
    """``{quoted}`figure``` -> an inline span of class ``quoted``."""
    return [nodes.inline(rawtext, text, classes=["quoted"])], []


def setup(app):  # noqa: ANN001 - Sphinx's extension entry point
    app.add_role("quoted", quoted_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
