"""The key footer, fitted: a key that does not fit whole is not shown at all (Textual's footer
scrolls past its edge, so at 80 columns the fleet view's ended in "/ Fi"). The keys keep their
order, so what shows is what acts first; `?` lists every key."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def fitted(screen: Screen) -> bool:
    """Every footer of `screen` is drawn fitted to its width."""
    return all(f.fitted for f in screen.query(FittedFooter))


class FittedFooter(Footer):
    fitted = False  # drawn fitted to its width (tests wait for it, as for any first draw)
    # the app's Quit, Help and End lead, before the screen's own keys (Textual lists the
    # focused widget's and the screen's first): every screen tells how to leave it, what its
    # keys are and how to end the campaign, at 80 columns too
    LEAD = ("quit_ask", "help", "end_campaign")

    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        lead = [k for k in keys if isinstance(k, FooterKey) and k.action in self.LEAD]
        yield from lead
        yield from (k for k in keys if k not in lead)

    def on_mount(self) -> None:
        self.call_after_refresh(self.fit)

    def on_resize(self) -> None:
        self.fitted = False
        for key in self.query(FooterKey):
            key.display = True  # measured again at the new width
        self.call_after_refresh(self.fit)

    async def recompose(self) -> None:
        self.fitted = False
        await super().recompose()
        self.call_after_refresh(self.fit)

    def fit(self) -> None:
        """Hide each key from the first one that crosses the edge (or the palette's key) on."""
        if not self.region.width:
            return  # not laid out yet: fitted once it is (its resize, its recompose)
        keys = list(self.query(FooterKey))
        palette = [k for k in keys if k.has_class("-command-palette")]
        edge = palette[0].region.x if palette else self.region.right
        over = False
        for key in keys:
            if key in palette:
                continue
            over = over or key.region.right > edge
            key.display = not over
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self.fitted = True
