"""The built book in a real browser: headless Chromium over every page, served from localhost.

Run after ``make book`` (``make book-check`` runs it). Needs Debian's ``chromium`` (``make
browser`` installs it) and the ``playwright`` package of the lock, which drives the system
Chromium and never downloads a browser of its own. Set ``COURSE_CHROMIUM`` to use another
Chromium binary.

For each page: no request fails, none goes to another host, the console logs no error, MathJax
has typeset every formula, every image has loaded and every visible figure has an alt
text that describes it (not a file name), and a page with a saved widget shows it
rendered (its plain-image copy, shown without JavaScript, hidden). The search page finds
"attention". A screenshot of each page is saved in
``_build/browser/`` for people to look at.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
# COURSE_BOOK_HTML=/tmp/other/_build/html checks another build of the book (as test_built_book).
HTML = Path(os.environ.get("COURSE_BOOK_HTML") or ROOT / "_build" / "html")
SHOTS = HTML.parent / "browser"
PAGES = sorted(
    p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
    if not p.relative_to(HTML).parts[0].startswith("_") and p.name != "index.html"
) if HTML.is_dir() else []  # index.html only redirects (test_index_opens_the_preface)
# Flags for a closed network: without them Chromium keeps trying to reach Google's services.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps"]

pytestmark = pytest.mark.skipif(not PAGES, reason="no built book: run 'make book' first")


def _chromium() -> str:
    for candidate in (os.environ.get("COURSE_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (found := shutil.which(candidate)):
            return found
    pytest.fail("no Chromium found: install Debian's package with 'make browser' (or "
                "'apt-get install chromium'), or set COURSE_CHROMIUM to a Chromium binary",
                pytrace=False)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture(scope="module")
def site():
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class PageVisit:
    """Everything a page did while it loaded: requests, failures, console errors."""

    def __init__(self, browser, site: str, path: str) -> None:
        self.site_host = urlparse(site).netloc
        self.requests: list[str] = []
        self.foreign: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.context.route("**/*", self._route)
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        self.page.on("response", self._response)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.goto(f"{site}/{path}", wait_until="load")

    def _route(self, route) -> None:
        url = route.request.url
        self.requests.append(url)
        if urlparse(url).scheme in ("data", "blob") or urlparse(url).netloc == self.site_host:
            route.continue_()
        else:  # the book must not need any other host: record it and never reach it
            self.foreign.append(url)
            route.abort()

    def _response(self, response) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _console(self, message) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def visit(browser, site):
    visits = []

    def open_page(path: str) -> PageVisit:
        visits.append(PageVisit(browser, site, path))
        return visits[-1]

    yield open_page
    for v in visits:
        v.close()


UNTYPESET_MATH = """() => [...document.querySelectorAll('.math')]
    .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))"""
BROKEN_IMAGES = """() => [...document.images]
    .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'))"""
# Visible images whose alt text is missing, a file name or too short to describe anything (a
# widget's own image is exempt: the widget's controls and message describe it).
IMAGES_WITHOUT_ALT = """() => [...document.images]
    .filter(i => i.offsetParent !== null && !i.closest('.jupyter-widgets, .widget-image'))
    .filter(i => {
        const alt = (i.getAttribute('alt') || '').trim();
        return alt.split(/\\s+/).length < 8 || alt === i.getAttribute('src')
            || /\\.(png|svg|jpe?g|gif)$|_images\\//i.test(alt); })
    .map(i => (i.getAttribute('src') || '').slice(0, 60))"""
WIDGET_VIEWS = """() => ({
    saved: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')
        .length,
    rendered: document.querySelectorAll('.jupyter-widgets.widget-container, .widget-vbox')
        .length,
    images: [...document.querySelectorAll('.widget-image')]
        .filter(i => i.complete && i.naturalWidth > 0).length})"""


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_everything_from_the_book_and_renders(visit, path):
    v = visit(path)
    page = v.page
    if page.evaluate("() => document.querySelector('.math') !== null"):
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup"
                               ".promise", timeout=20_000)
        page.evaluate("() => MathJax.startup.promise")
        assert page.evaluate(UNTYPESET_MATH) == [], "MathJax left formulas untypeset"
    has_widgets = "application/vnd.jupyter.widget-view+json" in (HTML / path).read_text(
        encoding="utf-8")
    if has_widgets:
        page.wait_for_function(f"() => ({WIDGET_VIEWS})().images > 0", timeout=20_000)
        views = page.evaluate(WIDGET_VIEWS)
        assert views["rendered"] >= 1 and views["images"] >= 1, views
        # the plain-image copy of the demo is hidden once the widget shows
        page.wait_for_function("() => [...document.querySelectorAll('.tag_widget-fallback')]"
                               ".every(e => e.offsetParent === null)", timeout=10_000)
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BROKEN_IMAGES) == [], "images that did not load"
    assert page.evaluate(IMAGES_WITHOUT_ALT) == [], "images without a describing alt text"
    assert v.foreign == [], "requests to another host"
    assert v.failed == [], "failed requests"
    assert v.errors == [], "console errors:\n" + "\n".join(v.errors)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / (path.replace("/", "_").removesuffix(".html") + ".png"))
    if has_widgets:
        page.locator(".widget-vbox").first.screenshot(
            path=SHOTS / (path.replace("/", "_").removesuffix(".html") + "_widget.png"))


def test_every_chapter_offers_its_executed_notebook_for_download(visit):
    for path in [p for p in PAGES if p.startswith("book/0")]:
        v = visit(path)
        link = v.page.locator(".dropdown-download-buttons a[href$='.ipynb']")
        assert link.count() == 1, f"{path}: no .ipynb in the download menu"
        response = v.page.request.get(urljoin(v.page.url, link.get_attribute("href")))
        assert response.status == 200, path
        notebook = json.loads(response.body())
        outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
        assert notebook["nbformat"] == 4 and outputs, f"{path}: the notebook has no outputs"


def test_every_chapter_with_a_widget_demo_saved_it_in_the_page():
    chapters = [p for p in PAGES if p.startswith("book/0")]
    assert chapters, "no chapter pages in the build"
    missing = [p for p in chapters if "application/vnd.jupyter.widget-state+json" not in
               (HTML / p).read_text(encoding="utf-8")]
    assert missing == [], "chapters without saved widget state"


def test_index_opens_the_preface(visit):
    v = visit("index.html")
    v.page.wait_for_url("**/book/preface.html", timeout=20_000)
    assert v.foreign == [] and v.failed == [] and v.errors == []


def test_search_finds_attention(visit):
    v = visit("search.html?q=attention")
    v.page.wait_for_selector("#search-results ul.search li", timeout=20_000)
    titles = v.page.locator("#search-results ul.search li a").all_inner_texts()
    assert any("attention" in t.lower() for t in titles), titles
    assert v.foreign == [] and v.failed == [] and v.errors == []


# The architecture diagrams (issue 22): every <figure id="fig-ch..."> that shows an image, on
# every chapter that has one (at least chapters 3 to 7), in the pydata theme's two colour modes,
# set as the theme's switch sets them.
DIAGRAM_SIZES = """() => [...document.querySelectorAll('figure[id^="fig-ch"] img')].map(i => {
    const box = i.getBoundingClientRect();
    return {id: i.closest('figure').id, loaded: i.complete && i.naturalWidth > 0,
            width: box.width, height: box.height, alt: (i.getAttribute('alt') || '').trim()}; })"""
SET_MODE = """mode => { document.documentElement.dataset.mode = mode;
    document.documentElement.dataset.theme = mode; return getComputedStyle(document.body)
    .backgroundColor; }"""


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_the_diagrams_render_in_both_colour_modes(visit, mode):
    chapters = [p for p in PAGES if p.startswith("book/0")
                and 'id="fig-ch' in (HTML / p).read_text(encoding="utf-8")]
    for number in range(3, 8):
        assert any(p.startswith(f"book/0{number}_") for p in chapters), f"chapter {number}"
    backgrounds = set()
    for path in chapters:
        page = visit(path).page
        backgrounds.add(page.evaluate(SET_MODE, mode))
        page.wait_for_load_state("networkidle")
        diagrams = page.evaluate(DIAGRAM_SIZES)
        assert diagrams, f"{path}: no diagram (figure id fig-ch...)"
        for d in diagrams:
            assert d["loaded"] and d["width"] > 100 and d["height"] > 50, (path, d)
            assert len(d["alt"].split()) >= 8, (path, d)
        first = page.locator('figure[id^="fig-ch"] img').first
        first.scroll_into_view_if_needed()
        SHOTS.mkdir(parents=True, exist_ok=True)
        first.screenshot(path=SHOTS / f"{path.replace('/', '_').removesuffix('.html')}"
                                      f"_diagram_{mode}.png")
    dark = [b for b in backgrounds if b.startswith("rgb(") and
            sum(int(c) for c in b[4:-1].split(",")) < 3 * 80]
    assert bool(dark) == (mode == "dark"), f"the {mode} mode's page background: {backgrounds}"
