"""The first-start card: the bundled model is a small demo; here is the best model that fits this computer.

Shown on the empty chat page while the model in use is the bundled SmolLM2-135M (``core.hub.suggest``). Once
this computer's speed is measured (``planner.speed``; at first start ``first_measure`` measures it) it names
the model ``suggest`` picks, in ``suggest.offer_line``'s words, the same as the Hub tab and the summary's "too
small" note (offline, no request: nothing leaves the computer until the user asks); until then it says
"Measuring this computer…" and offers nothing. One click on Download asks the hub on the ``hub`` lane for the candidates' files, largest first, lets the
planner judge each from its header (``hub.fit_files``), shows the verdict's badge and queues the first that fits
on the Models page (whose finished row offers Load now). Offline is the normal case on many machines: the card
then keeps its estimate, says in one calm line that the hub cannot be reached, and offers Try again; nothing
fails or blocks the chat.

Under the offer, one small badge per candidate ("1.5B Fits · 3B Fits · 7B Won't fit") says why this one is the
one offered: each is the estimate until the hub's header was read for it, then the planner's verdict (its tooltip
says which, and why).

Rules of use: ``attach_first_start(window)`` once. GUI thread; hub calls go through the executor.
"""

from __future__ import annotations

import functools
import html
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from hisho.core.hub import Fit, QuantFile
from hisho.core.hub.fit import LABELS
from hisho.core.hub.suggest import (
    CANDIDATES,
    Candidate,
    estimate,
    is_demo,
    is_slow,
    offer_line,
    suggest,
    why_not_larger,
)
from hisho.core.planner.speed import SpeedProfile
from hisho.gui import ops
from hisho.gui.models.hub_tab import badge_style, verdict_colour
from hisho.gui.shell.pages import ShowsPages
from hisho.gui.shell.protocols import HasState

if TYPE_CHECKING:
    from hisho.core.appstate import Now

log = logging.getLogger("hisho.gui")
CARD_WIDTH = 600

DEMO_LINE = ("You are chatting with SmolLM2-135M, a small demo model bundled so Hisho works offline. It answers "
             "fast but invents facts and cannot summarize documents.")


@dataclass(frozen=True)
class Estimated:
    """What the offline estimate found (made on the hub lane, shown on the GUI thread)."""

    pick: Candidate | None
    verdicts: dict[str, str]          # candidate file -> fits | tight | wont_fit
    profile: SpeedProfile | None      # this machine's speed, where measured
    not_larger: str                   # why a larger candidate that fits is not offered


class FirstStartWindow(ShowsPages, HasState, Protocol):
    """What the card uses of the main window: the empty chat page it sits on (under its subtitle), the pages it
    opens, the services and the app's state (shown while the demo model answers)."""

    @property
    def empty(self) -> QWidget: ...

    @property
    def empty_subtitle(self) -> QLabel: ...


class FirstStartCard(QFrame):
    def __init__(self, window: FirstStartWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.setObjectName("DemoCard")
        self.setMaximumWidth(CARD_WIDTH)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)

        self.candidate: Candidate | None = None
        self.speed_profile: SpeedProfile | None = None  # this machine's speed, where measured (planner.speed)
        self.not_larger = ""                            # why a larger model that fits is not offered
        self.file: QuantFile | None = None
        self.fit: Fit | None = None
        self.lookups = 0                 # hub lookups finished (tests wait on it)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(16, 12, 16, 12)
        lay.setSpacing(6)
        self.demo = QLabel(DEMO_LINE)
        self.demo.setWordWrap(True)
        row = QHBoxLayout()
        self.offer = QLabel("")
        self.offer.setWordWrap(True)
        self.offer.setTextFormat(Qt.TextFormat.RichText)
        self.badge = QLabel("")
        self.badge.setObjectName("FitBadge")
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        row.addWidget(self.offer, 1)
        row.addWidget(self.badge)
        self.ladder: dict[str, QLabel] = {}     # candidate file -> its badge, smallest first
        ladder = QHBoxLayout()
        ladder.setSpacing(6)
        for cand in CANDIDATES:
            badge = QLabel("")
            badge.setObjectName("LadderBadge")
            badge.hide()
            self.ladder[cand.file] = badge
            ladder.addWidget(badge)
        ladder.addStretch(1)
        self.speed_note = QLabel("Measuring this computer…")  # first start, while its speed is measured
        self.speed_note.setObjectName("Meta")
        self.speed_note.hide()
        self.status = QLabel("")
        self.status.setObjectName("Meta")
        self.status.setWordWrap(True)
        buttons = QHBoxLayout()
        self.download = QPushButton("Download")
        self.download.setObjectName("Primary")
        self.download.clicked.connect(self.look_up)
        self.retry = QPushButton("Try again")
        self.retry.setObjectName("Flat")
        self.retry.clicked.connect(self.look_up)
        self.browse = QPushButton("Other models…")
        self.browse.setObjectName("Flat")
        self.browse.clicked.connect(lambda: self._models("Hub"))
        self.dismiss = QPushButton("Not now")
        self.dismiss.setObjectName("Flat")
        self.dismiss.clicked.connect(self.not_now)
        for b in (self.download, self.retry, self.browse):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.dismiss)
        lay.addWidget(self.demo)
        lay.addLayout(row)
        lay.addLayout(ladder)
        lay.addWidget(self.speed_note)
        lay.addWidget(self.status)
        lay.addLayout(buttons)
        self.dismissed = False
        self.looked = False  # the user asked the hub: a later estimate must not replace what it found
        self.unmeasured = False  # the start's measurement ended without a profile
        self._estimate()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        """As wide as a readable paragraph; the window's width may squeeze it (its text wraps)."""
        return QSize(CARD_WIDTH, self.heightForWidth(CARD_WIDTH))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        return QSize(260, super().minimumSizeHint().height())

    # ----- what to offer ---------------------------------------------------------------------------------

    def _estimate(self) -> None:
        """Offline and at once: the largest candidate whose published size fits this machine's budget."""
        from hisho.gui.models.models_page import planner_budget

        self.download.hide()  # a disabled primary button still looks pressable
        self.retry.hide()

        models = self.w.ctx.models

        def work() -> Estimated:
            from hisho.core.planner import speed

            budget, _opts = planner_budget()
            profile = speed.load_profile()
            installed = frozenset(Path(e.path).name for e in models.list())  # never offered again
            pick = suggest(budget, profile, installed)
            return Estimated(pick, {c.file: estimate(c, budget) for c in CANDIDATES}, profile,
                             why_not_larger(pick, budget, profile) if pick is not None else "")

        ops.hub(self.w.ctx.executor, work).success(self._estimated).failure(self._lookup_failed).run()

    def rung(self, cand: Candidate, verdict: str, why: str, planned: bool = False) -> None:
        """One candidate's badge under the offer: "3B Fits", in the Models page's verdict colours: outlined
        while it is an estimate, filled once the planner judged the file's header (``planned``)."""
        badge = self.ladder[cand.file]
        badge.setText(f"{cand.params_b:g}B {LABELS.get(verdict, 'Unknown')}")
        badge.setProperty("verdict", verdict)
        small = "font-size: 8pt; font-weight: 600; border-radius: 7px; padding: 1px 7px;"
        badge.setStyleSheet(badge_style(verdict) + small if planned else
                            f"color: {verdict_colour(verdict)}; border: 1px solid {verdict_colour(verdict)}; {small}")
        badge.setToolTip(f"{cand.title}: {why}")
        badge.show()

    def _estimated(self, found: Estimated) -> None:
        pick, verdicts = found.pick, found.verdicts
        self.speed_profile, self.not_larger = found.profile, found.not_larger
        self.candidate = pick
        if found.profile is None:
            # Nothing is offered from memory alone: the largest that fits may be far too slow here.
            self.waiting_for_speed()
            return
        for cand in CANDIDATES:
            verdict = verdicts[cand.file]
            shown = "slow" if verdict != "wont_fit" and is_slow(cand, found.profile) else verdict
            self.rung(cand, shown, f"estimated from its {cand.size / 2**30:.1f} GiB published size "
                      "and a 4K-token context; the hub's header decides")
        if pick is None:
            self.offer.setText("This computer has little memory to spare: the demo may be the best fit. The "
                               "Models page lists smaller files.")
            self.status.setText("")
            self.download.hide()
            return
        self._show_offer(pick, "estimate", "Estimated from its published size; the hub's header decides")
        self.status.setText("Download first reads the file's header on Hugging Face (about 1 MiB) so the memory "
                            "planner can check it fits, then fetches it.")
        self.download.show()

    def waiting_for_speed(self, failed: bool = False) -> None:
        """No pick and no badges until this computer's speed is known (``suggest`` offers none before)."""
        for badge in self.ladder.values():
            badge.hide()
        self.badge.setText("")
        self.badge.setStyleSheet("")
        self.download.hide()
        self.status.setText("")
        self.offer.setText("This computer's speed is not measured (hisho bench speed measures it), so no model "
                           "is suggested yet: Other models… lists the ones that fit." if failed or self.unmeasured else "Measuring this computer… a model that suits it is suggested once "
                           "its speed is known (about a minute).")

    def _show_offer(self, pick: Candidate, verdict: str, why: str) -> None:
        said = (html.escape(offer_line(pick, self.speed_profile)) if self.speed_profile is not None
                else html.escape(pick.title))
        said = said.replace(html.escape(pick.title), f"<b>{html.escape(pick.title)}</b>", 1)
        larger = f"<br>{html.escape(self.not_larger)}." if self.not_larger else ""
        self.offer.setText(f"A model that suits this computer: {said}.{larger}")
        label = LABELS.get(verdict, "Estimate") if verdict != "unknown" else "Estimate"
        self.badge.setText(label)
        self.badge.setProperty("verdict", verdict)
        self.badge.setStyleSheet(badge_style(verdict))
        self.badge.setToolTip(why)

    def look_up(self) -> None:
        """Hub lane: the candidates' files (largest that fits first), each judged by the planner; the one that
        fits is then downloaded. Only on the user's click: nothing leaves the computer by itself."""
        from hisho.gui.models.models_page import planner_budget

        self.looked = True
        self.status.setText("Checking the file on the hub…")
        self.download.hide()
        self.retry.hide()
        start = CANDIDATES.index(self.candidate) if self.candidate in CANDIDATES else len(CANDIDATES) - 1

        post = self.w.ctx.executor.post

        def work() -> tuple[Candidate, QuantFile, Fit] | None:
            from hisho.core.hub import fit_files, repo_files

            budget, opts = planner_budget()
            for cand in reversed(CANDIDATES[: start + 1]):
                files = [f for f in repo_files(cand.repo) if f.name == cand.file]
                if not files:
                    continue
                fit = fit_files(files, budget, calibrate=True, **opts)[0]
                post(functools.partial(self.rung, cand, fit.badge, f"the planner, from its header: {fit.why}",
                                       True))
                if fit.verdict == "fits":
                    return cand, files[0], fit
            return None

        ops.hub(self.w.ctx.executor, work).success(self._found).failure(self._lookup_failed).run()

    def _found(self, found: tuple[Candidate, QuantFile, Fit] | None) -> None:
        self.lookups += 1
        if found is None:
            self.status.setText("None of the suggested files fits with room to spare; the Models page has more.")
            self.download.hide()  # a disabled primary button still looks pressable
            return
        self.candidate, self.file, self.fit = found
        why = self.fit.why
        if why.startswith("best quality that fits this machine (") and why.endswith(")"):
            why = why[len("best quality that fits this machine ("):-1]  # one file: "best" says nothing here
        self._show_offer(self.candidate, self.fit.verdict, f"{self.candidate.repo}\n{why}")
        self.status.setText(f"{self.file.name} · {why}")
        self.start_download()

    def _lookup_failed(self, exc: BaseException) -> None:
        self.lookups += 1
        from hisho.core.errors import UserError

        if not isinstance(exc, UserError):
            log.info("first-start lookup failed", exc_info=exc)
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        offline = type(exc).__name__ == "HubOffline"
        self.status.setText("Offline: the hub cannot be reached right now. The demo keeps working; download "
                            "a model when you are online." if offline else f"Could not check the hub: {line}")
        self.download.hide()  # a disabled primary button still looks pressable
        self.retry.show()

    def measuring(self) -> None:
        """This computer's speed is being measured (first start: hisho.gui.models.first_measure)."""
        if self.speed_profile is None and not self.looked:
            self.waiting_for_speed()  # the offer itself says so
        else:
            self.speed_note.show()

    def speed_landed(self, profile: SpeedProfile | None) -> None:
        """The measurement ended (None: it failed; the card stays without a speed): offer again with it."""
        self.speed_note.hide()
        if profile is None:
            self.unmeasured = True
            if not self.looked and self.speed_profile is None:
                self.waiting_for_speed(failed=True)
            return
        if self.looked:
            self.speed_profile = profile
            if self.candidate is not None:
                self._show_offer(self.candidate, str(self.badge.property("verdict") or ""), self.badge.toolTip())
            return
        self._estimate()

    # ----- actions ---------------------------------------------------------------------------------------

    def _models(self, tab: str) -> Any:
        from hisho.gui.models.models_page import open_models

        return open_models(self.w, tab)

    def start_download(self) -> None:
        if self.file is None:
            return
        page = self._models("Downloads")
        page.download(self.file)
        self.status.setText(f"Downloading {self.file.name}: the Downloads tab shows progress; Load now switches "
                            "to it when it is verified.")

    def follow(self, now: Now) -> None:
        """Visible while the demo is what answers (a switch to a downloaded model hides it; the app's state)."""
        demo = not now.remote and bool(now.path) and is_demo(now.path)
        self.setVisible(demo and not self.dismissed)

    def not_now(self) -> None:
        self.dismissed = True
        self.hide()
        from hisho.core import settings as settings_mod

        def work() -> None:
            s = settings_mod.load()
            s.set("demo_card_dismissed", True)
            s.save()

        ops.database(self.w.ctx.executor, work).run()


def _empty_page_box(window: FirstStartWindow) -> QVBoxLayout | None:
    """The empty chat page's column (title, subtitle, suggestions), found from its subtitle."""
    page_layout = window.empty.layout()
    stack: list[QLayout] = [page_layout] if page_layout is not None else []
    while stack:
        lay = stack.pop()
        if isinstance(lay, QVBoxLayout) and lay.indexOf(window.empty_subtitle) >= 0:
            return lay
        for i in range(lay.count()):
            item = lay.itemAt(i)
            child = item.layout() if item is not None else None
            if child is not None:
                stack.append(child)
    return None


def attach_first_start(window: FirstStartWindow) -> FirstStartCard | None:
    """Put the card on the empty chat page; it shows while the model in use is the bundled demo."""
    if bool(window.ctx.settings["demo_card_dismissed"]):
        return None
    box = _empty_page_box(window)
    if box is None:
        return None
    card = FirstStartCard(window)
    box.insertWidget(box.indexOf(window.empty_subtitle) + 1, card, 0, Qt.AlignmentFlag.AlignHCenter)
    card.hide()

    window.state.changed.connect(card.follow)
    card.follow(window.state.now)
    window.first_start = card  # type: ignore[attr-defined]  # tests and screenshots reach it here
    return card
