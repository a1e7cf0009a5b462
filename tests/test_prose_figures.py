"""The detector of typed figures that the built-book test runs over every chapter."""

from __future__ import annotations

from prose_figures import prose_text, typed_figures


def page(body: str) -> str:
    return (f'<article class="bd-article"><section id="summary"><h2>Summary</h2>{body}'
            '</section></article>')


def test_a_typed_decimal_in_a_summary_is_found():
    found = typed_figures(page("<ul><li>The encoder-decoder reverses digits (exact match 0.997)."
                               "</li></ul>"))
    assert len(found) == 1 and "'0.997'" in found[0] and "exact match" in found[0]


def test_glued_and_quoted_figures_are_not():
    html = page('<p>It reaches <span class="pasted-text">0.953</span> where the paper reports '
                '<span class="quoted">0.75</span>.</p>')
    assert typed_figures(html) == []
    assert "0.953" not in prose_text(html) and "reaches" in prose_text(html)


def test_code_outputs_and_widget_pictures_are_not_prose():
    html = page('<div class="cell docutils container"><div class="cell_input docutils container">'
                '<pre>lr = 3.5e-3</pre></div><div class="cell_output docutils container">'
                '<pre>exact match 0.953</pre></div></div><p>See <code>x = 0.5</code>.</p>')
    assert typed_figures(html) == []


def test_figures_in_the_math_are_found():
    found = typed_figures(page(r'<p>to <span class="math notranslate nohighlight">\(9 \times '
                               r'10^{-16}\)</span> and \(2.5\) nats</p>'))
    assert len(found) == 2


def test_scientific_signed_and_thousands_figures_are_found():
    text = page("<p>differences of 2.5e-16, a loss of -1.5 and 1,234.5 steps</p>")
    assert [f.split()[0] for f in typed_figures(text)] == ["'2.5e-16'", "'-1.5'", "'1,234.5'"]


def test_identifiers_that_look_like_decimals_are_allowed():
    html = page("<p>Task 1.2, questions 1.7 to 1.9 and tasks 4.1 and 4.2 follow Fig. 7.1 and "
                "section 2.3; built with "
                "Python 3.11, torch 2.13.0 and shipped under CC-BY 2.5.</p>")
    assert typed_figures(html) == []
