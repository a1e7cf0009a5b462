"""The base of the book's interactive widgets: controls above a picture and a line of text.

Every chapter's widget (``viz.ngram_explorer`` ... ``viz.sampling_explorer``) is an
:class:`Explorer`. The base owns what they all do the same way: the matplotlib figure
(:attr:`Explorer.figure`, which a page shows as the static picture of the widget in the rendered
book), the PNG image widget that shows it in a live notebook, the message line under it, and
"a control changed: draw again". A subclass makes its controls, calls :meth:`Explorer._show`,
and implements :meth:`Explorer.draw`.

A new widget looks like this::

    class ScaleExplorer(Explorer):
        def __init__(self, *, scale: float = 1.0) -> None:
            super().__init__(figsize=(5.0, 3.5))
            self.scale = widgets.FloatSlider(value=scale, description="scale")
            self._show([self.scale], watch=[self.scale])

        def draw(self) -> None:
            ax = self.figure.subplots()
            ax.plot([0, 1], [0, self.scale.value])
            self.message.value = f"slope {self.scale.value:g}"
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import ipywidgets as widgets
from matplotlib.figure import Figure

from coursepkg.viz import common

__all__ = ["Explorer"]


class Explorer(widgets.VBox):
    """A widget: rows of controls, then the current picture, then a message line.

    Changing any watched control redraws :attr:`figure` and the PNG shown in :attr:`image`.
    Outside a kernel the object still works: setting a control's ``value`` redraws (the tests
    drive the widgets that way, and the book sets controls before it shows :attr:`figure`).

    Attributes:
        figure: the matplotlib figure of the current state, redrawn in place (the same object
            for the widget's whole life).
        image: the image widget that shows ``figure`` in a live notebook.
        message: an HTML line under the picture.
    """

    def __init__(self, *, figsize: tuple[float, float]) -> None:
        super().__init__()
        self.figure: Figure = common.new_figure(*figsize)
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self._held = 0

    def _show(self, rows: Sequence[widgets.Widget], *, watch: Sequence[widgets.Widget]) -> None:
        """Lay the rows of controls out above the picture, redraw whenever a control of
        ``watch`` changes, and draw the first picture. The last call of a subclass's
        ``__init__``."""
        self.children = (*rows, self.image, self.message)
        for control in watch:
            control.observe(self._on_change, names="value")
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        if not self._held:
            self.redraw()

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Change several controls at once (a slider's value, then its range), then redraw
        once, at the end, instead of once per control."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if not self._held:
            self.redraw()

    def redraw(self) -> Figure:
        """Draw the picture for the current controls, show it, and return the figure."""
        self.figure.clear()
        self.draw()
        self.image.value = common.figure_png(self.figure)
        return self.figure

    def draw(self) -> None:
        """Draw the current state into the cleared :attr:`figure` and set :attr:`message`."""
        raise NotImplementedError(f"{type(self).__name__} must implement draw()")

    def _nothing_to_show(self, title: str, message: str = "") -> None:
        """An empty picture with a title saying why (e.g. "type some text"), and a message."""
        ax = self.figure.subplots()
        ax.set_axis_off()
        ax.set_title(title)
        self.message.value = message
