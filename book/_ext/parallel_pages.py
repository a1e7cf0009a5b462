"""Execute the book's pages side by side: one page per core.

Every page runs its experiments on one torch thread (``course.page_setup(threads=1)``), so a
serial build leaves the second core idle while it executes the chapters, which is most of a clean
build. Jupyter Book 1's command line has no ``-j``; this extension turns on Sphinx's parallel
reading (MyST-NB executes a page while Sphinx reads it) with ``COURSE_BOOK_JOBS`` processes
(default: the number of cores).

Sphinx reads in chunks of several documents per process (``make_chunks``): with this book's
fifteen pages that puts all seven chapters in one chunk, so one process would execute them all.
While reading, the chunks here hold one page each, handed to the next free process, the
longest first. Writing the HTML keeps Sphinx's own chunks.
"""

from __future__ import annotations

import os

import sphinx.builders
from sphinx.application import Sphinx
from sphinx.util.parallel import make_chunks

JOBS_VARIABLE = "COURSE_BOOK_JOBS"

# Extensions of the build that do not declare whether they can read in parallel, which makes
# Sphinx read serially. Each only acts on configuration, static files or the merged environment:
VOUCHED_READ_SAFE = {
    # renumbers the toctrees after reading, from the environment every process's reading merges into
    "sphinx_multitoc_numbering": "numbers sections once all pages are read",
    # sets mathjax_path and copies MathJax into _static at builder-inited
    "sphinx-mathjax-offline": "configuration and static files only",
    # acts only for the LaTeX builder
    "sphinx_jupyterbook_latex": "LaTeX builder only",
}


def jobs_from_environment() -> int:
    """The number of pages executed at once: ``COURSE_BOOK_JOBS``, else the machine's cores."""
    raw = os.environ.get(JOBS_VARIABLE, "").strip()
    if not raw:
        return max(1, os.cpu_count() or 1)
    try:
        jobs = int(raw)
    except ValueError:
        raise ValueError(f"{JOBS_VARIABLE} must be a whole number, got {raw!r}") from None
    if jobs < 1:
        raise ValueError(f"{JOBS_VARIABLE} must be at least 1, got {jobs}")
    return jobs


def one_page_per_chunk(arguments, nproc, maxbatch=10):
    return [[name] for name in arguments]


def _create_the_execution_cache(app, env, docnames):
    # MyST-NB opens its execution cache (an SQLite database) when it first executes a page; two
    # processes opening a cache that does not exist yet race to create its tables and one fails.
    config = getattr(env, "mystnb_config", None)
    if app.parallel > 1 and config is not None and config.execution_mode == "cache":
        from jupyter_cache import get_cache

        get_cache(config.execution_cache_path).list_cache_records()  # creates it once, here


def _code_cells(env, docname: str) -> int:
    path = env.doc2path(docname)
    try:
        return open(path, encoding="utf-8").read().count("```{code-cell}")
    except OSError:
        return 0


def _pages_one_by_one(app, env, docnames):
    # Sphinx starts the first processes on the first pages, then each freed process on the LAST
    # page still waiting (its queue pops from the end). Pages without code first and the pages
    # with the most code cells last, so the long executions start early and the short ones fill
    # the gaps at the end.
    docnames.sort(key=lambda name: (_code_cells(env, name), name))
    sphinx.builders.make_chunks = one_page_per_chunk


def _back_to_sphinx_chunks(app, env):
    sphinx.builders.make_chunks = make_chunks


def _vouch_for_the_silent_extensions(app: Sphinx) -> None:
    for name in VOUCHED_READ_SAFE:
        extension = app.extensions.get(name)
        if extension is not None and extension.parallel_read_safe is None:
            extension.parallel_read_safe = True


def setup(app: Sphinx) -> dict:
    jobs = jobs_from_environment()
    if jobs > 1 and app.parallel <= 1:
        app.parallel = jobs
    app.connect("builder-inited", _vouch_for_the_silent_extensions)
    app.connect("env-before-read-docs", _create_the_execution_cache)
    app.connect("env-before-read-docs", _pages_one_by_one)
    app.connect("env-updated", _back_to_sphinx_chunks)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
