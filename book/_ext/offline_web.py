"""Serve the book's JavaScript from the book itself: no CDN, no other host.

Jupyter Book 1 loads require.js and the Jupyter widgets HTML manager from CDNs when a page
holds saved widget state (MathJax is already served locally by ``sphinx-mathjax-offline``).
This file does two jobs:

* as a script, ``python book/_ext/offline_web.py install DEST`` (run by ``make venv``) fetches
  the pinned npm packages below from the npm registry, checks each tarball against the
  integrity hash recorded here, and extracts the files the book needs into DEST;
* as a Sphinx extension (``sphinx.local_extensions`` in ``_config.yml``), it copies DEST into
  the build's ``_static/`` and points myst-nb's widget loader at that copy, so a page with
  widgets loads ``_static/widgets/embed.js`` (the standard-controls embedder, which needs no
  require.js) and its fonts from the same folder. It also hides each widget's static fallback
  picture once the widget has rendered, and offers every executed chapter as an ``.ipynb`` in
  the page's download menu.

The assets folder defaults to ``.venv/share/course-web`` next to the book; set
``COURSE_WEB_ASSETS`` to use another one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

# (npm package, version, integrity of its tarball, {folder under DEST: files taken from it}).
# Fonts are the webpack chunks that embed.js loads relative to its own address.
PACKAGES = [
    (
        "@jupyter-widgets/html-manager",
        "1.0.15",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bC"
        "rJ3CQA==",
        {"widgets": ("package/dist/embed.js", "package/dist/embed.js.LICENSE.txt",
                     "package/dist/*.woff2", "package/dist/*.woff", "package/dist/*.ttf",
                     "package/dist/*.eot", "package/dist/*.svg")},
    ),
]
WIDGET_SCRIPT = "widgets/embed.js"
ROOT = Path(__file__).resolve().parents[2]


def assets_dir() -> Path:
    return Path(os.environ.get("COURSE_WEB_ASSETS", ROOT / ".venv" / "share" / "course-web"))


def _stamp(dest: Path) -> Path:
    return dest / "installed.txt"


def _wanted() -> str:
    return "".join(f"{name}@{version} {integrity}\n" for name, version, integrity, _ in PACKAGES)


def _tarball_url(name: str, version: str) -> str:
    registry = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org/").rstrip("/")
    return f"{registry}/{name}/-/{name.split('/')[-1]}-{version}.tgz"


def _check_integrity(data: bytes, integrity: str, what: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"{what}: the download does not match its pinned {algorithm} hash")


def install(dest: Path) -> None:
    """Fetch, check and extract every pinned package into dest (once)."""
    if _stamp(dest).is_file() and _stamp(dest).read_text() == _wanted():
        return
    shutil.rmtree(dest, ignore_errors=True)
    for name, version, integrity, folders in PACKAGES:
        url = _tarball_url(name, version)
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as error:
            raise SystemExit(
                f"could not fetch {name}@{version} from the npm registry ({url}): {error}"
            ) from error
        _check_integrity(data, integrity, f"{name}@{version}")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            for folder, patterns in folders.items():
                target = dest / folder
                target.mkdir(parents=True, exist_ok=True)
                for pattern in patterns:
                    matched = [m for m in members if m.isfile() and Path(m.name).match(pattern)]
                    if not matched:
                        raise SystemExit(f"{name}@{version} has no file matching {pattern}")
                    for member in matched:
                        source = tar.extractfile(member)
                        assert source is not None
                        (target / Path(member.name).name).write_bytes(source.read())
        print(f"installed {name}@{version} into {dest}")
    _stamp(dest).write_text(_wanted())


def _add_static(app, config) -> None:  # noqa: ANN001 - Sphinx's callback signature
    dest = assets_dir()
    if not (dest / WIDGET_SCRIPT).is_file():
        from sphinx.errors import ConfigError

        raise ConfigError(
            f"the book's web assets are missing from {dest}; run 'make venv' (or "
            f"'python book/_ext/offline_web.py install {dest}') once, then build again"
        )
    config.html_static_path = [*config.html_static_path, str(dest)]
    # myst-nb adds these to every page that holds saved widget state; a relative name is
    # served from _static/. embed.js renders the standard controls only and never looks
    # for other widget modules, so it has no CDN to reach.
    config.nb_ipywidgets_js = {WIDGET_SCRIPT: {}}


# The widgets typeset their labels with MathJax 2's API (``MathJax.Hub.Queue``); the book serves
# MathJax 3, which has no Hub. Give every MathJax object the page gets (the configuration first,
# then MathJax itself when it loads) a Hub whose Queue asks MathJax 3 to typeset the element.
MATHJAX_HUB_SHIM = """(function () {
  function withHub(mathjax) {
    if (mathjax && typeof mathjax === "object" && !mathjax.Hub) {
      mathjax.Hub = {Queue: function (job) {
        var element = job && job[2], current = window.MathJax;
        if (current && current.typesetPromise) {
          current.typesetPromise(element ? [element] : undefined).catch(function () {});
        }
      }};
    }
    return mathjax;
  }
  var current = withHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {configurable: true,
    get: function () { return current; }, set: function (value) { current = withHub(value); }});
})();"""


# A chapter shows each widget demo twice in its source: the live widget, then a cell tagged
# widget-fallback that draws the same view as a plain image. Once the widget manager has
# rendered the page's widgets, the fallback is hidden; without JavaScript it stays.
HIDE_FALLBACKS = """document.addEventListener("DOMContentLoaded", function () {
  var fallbacks = document.querySelectorAll(".tag_widget-fallback");
  var tries = 0;
  if (!fallbacks.length) { return; }
  var timer = setInterval(function () {
    var ready = document.querySelectorAll(".widget-image").length > 0;
    if (ready) { fallbacks.forEach(function (cell) { cell.style.display = "none"; }); }
    if (ready || ++tries > 200) { clearInterval(timer); }
  }, 50);
});"""


def _offer_notebook(app, pagename, templatename, context, doctree) -> None:  # noqa: ANN001
    """Put each chapter's notebook, with the outputs of the book's execution, beside its
    source, for the theme's download menu."""
    import nbformat
    from jupyter_cache import get_cache

    build = Path(app.outdir).parent
    converted = build / "jupyter_execute" / f"{pagename}.ipynb"  # myst-nb's copy, no outputs
    if not converted.is_file():
        return
    notebook = nbformat.read(converted, as_version=4)
    if (build / ".jupyter_cache").is_dir():
        try:  # the executed cells and widget state from the execution cache
            _, notebook = get_cache(build / ".jupyter_cache").merge_match_into_notebook(notebook)
        except KeyError:  # not executed through the cache: offer it without outputs
            pass
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def _theme_mode(app, config) -> None:  # noqa: ANN001 - Sphinx's callback signature
    # Without a default the theme starts with an empty mode and logs a console error.
    config.html_context = {"default_mode": "light", **config.html_context}


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension entry point
    app.connect("config-inited", _add_static)
    app.connect("config-inited", _theme_mode)
    app.connect("html-page-context", _offer_notebook, priority=100)  # before the theme's
    app.add_js_file(None, body=MATHJAX_HUB_SHIM, priority=100)
    app.add_js_file(None, body=HIDE_FALLBACKS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "install":
        raise SystemExit("usage: python book/_ext/offline_web.py install DEST")
    install(Path(sys.argv[2]))
