"""Launch buttons (Binder, JupyterHub) and the repository button, for the repository the book is in.

The offline book needs none of them, so ``_config.yml`` leaves ``repository.url`` empty. This
Sphinx extension (``sphinx.local_extensions`` in ``_config.yml``) fills it in at build time, so a
fork or a mirror gets buttons pointing at itself without editing the configuration:

* ``COURSE_REPOSITORY_URL`` (``make book REPOSITORY_URL=...``) names the repository, e.g.
  ``https://github.com/someone/ngrams-to-transformers``; ``none`` turns the buttons off;
* otherwise the ``origin`` remote of the checkout is used when it is a GitHub or GitLab address
  (``https://github.com/o/r(.git)`` or ``git@github.com:o/r(.git)``); a local path or any other
  host gives no buttons;
* ``COURSE_REPOSITORY_BRANCH`` (default: the checkout's current branch, else ``main``) is the
  branch the buttons open;
* ``COURSE_JUPYTERHUB_URL`` (``make book JUPYTERHUB_URL=...``), a JupyterHub with nbgitpuller,
  adds a JupyterHub button next to Binder's.

The buttons are links: nothing is loaded from those hosts until a reader clicks one. Binder
builds its environment from ``.binder/`` (the course's lock, the corpus, the package, and
JupyterLab opening the chapters' MyST files as notebooks through jupytext). Colab opens only
``.ipynb`` files from GitHub, and the chapters are MyST text files, so there is no Colab button;
"Running the notebooks" explains how to open a downloaded chapter there.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
BINDER = "https://mybinder.org"
_REMOTE = re.compile(
    r"^(?:https://(?P<host>github\.com|gitlab\.com)/|git@(?P<sshhost>github\.com|gitlab\.com):)"
    r"(?P<path>[\w.-]+/[\w.-]+?)(?:\.git)?/?$"
)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def repository_url(environ=os.environ, origin: str | None = None) -> str:
    """The repository's web address, or "" when the book gets no repository buttons.

    Args:
        environ: where ``COURSE_REPOSITORY_URL`` is looked up.
        origin: the ``origin`` remote's address (read from git when None).
    """
    chosen = environ.get("COURSE_REPOSITORY_URL", "").strip()
    if chosen:
        if chosen.lower() == "none":
            return ""
        if not re.match(r"^https?://[^/\s]+/\S+$", chosen):
            raise ValueError(f"COURSE_REPOSITORY_URL={chosen!r} is not a web address such as "
                             "https://github.com/someone/course (or 'none' for no buttons)")
        return chosen.rstrip("/").removesuffix(".git")
    origin = _git("remote", "get-url", "origin") if origin is None else origin
    found = _REMOTE.match(origin.strip())
    if not found:
        return ""
    return f"https://{found['host'] or found['sshhost']}/{found['path']}"


def theme_options(url: str, branch: str, jupyterhub_url: str = "") -> dict:
    """The ``html_theme_options`` of sphinx-book-theme that give the buttons for ``url``."""
    return {
        "repository_url": url,
        "repository_branch": branch,
        "path_to_docs": "",
        "use_repository_button": True,
        "launch_buttons": {
            "binderhub_url": BINDER,
            "jupyterhub_url": jupyterhub_url.rstrip("/"),
            "colab_url": "",
            "notebook_interface": "jupyterlab",
            "thebe": False,
        },
    }


def _configure(app, config) -> None:
    try:
        url = repository_url()
    except ValueError as error:
        raise RuntimeError(str(error)) from None
    if not url:
        return
    branch = (os.environ.get("COURSE_REPOSITORY_BRANCH", "").strip()
              or _git("rev-parse", "--abbrev-ref", "HEAD").replace("HEAD", "") or "main")
    options = theme_options(url, branch, os.environ.get("COURSE_JUPYTERHUB_URL", "").strip())
    config.html_theme_options = {**(config.html_theme_options or {}), **options}
    LOGGER.info(f"launch buttons for {url} (branch {branch}); set COURSE_REPOSITORY_URL=none "
                "for none")


def setup(app):
    app.connect("config-inited", _configure)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
