"""The window's pages and its rail: which pages there are, how each is built, and what opening one does.

Rules of use: ``add_pages(window)`` once, from the window's constructor after the menus. Each page is built the
first time it is shown and kept: Models (``hisho.gui.models.models_page``), the Memory planner
(``hisho.gui.models.planner_page``) and Settings (``hisho.gui.settings.preferences``). The openers other code
calls (``open_models``, ``open_planner``, ``open_preferences``) show these pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from hisho.gui.shell.pages import CHATS, NavRail, PageHost, ShowsPages
from hisho.gui.shell.protocols import SettingsWindow
from hisho.gui.shell.remote_switch import RemoteWindow

if TYPE_CHECKING:
    from hisho.gui.chat.composer import Composer
    from hisho.gui.models.models_page import ModelsPage
    from hisho.gui.settings.preferences import PreferencesDialog
    from hisho.gui.shell.toast import Toast

RAIL = ((CHATS, "Chats", "Chats (Ctrl+1); again: show or hide the chat list (Ctrl+B)"), ("models", "Models", "Models: installed, Hub, downloads (Ctrl+M)"),
        ("planner", "Memory", "Memory planner: what fits this computer (Ctrl+P)"))


class PageWindow(ShowsPages, SettingsWindow, RemoteWindow, Protocol):
    """What the pages' builders use of the main window, and what the pages they build use of it (the Models
    page offers remote engines; the planner is a ``ShowsPages`` with services and the controller)."""

    _models_page: ModelsPage | None   # the pages, once built (tests reach them here)
    _preferences: PreferencesDialog | None

    @property
    def host(self) -> PageHost: ...

    @property
    def rail(self) -> NavRail: ...

    @property
    def toast(self) -> Toast: ...

    @property
    def right(self) -> QWidget: ...   # the chat column, where the toast sits above the message box

    @property
    def composer(self) -> Composer: ...

    def toggle_sidebar(self) -> None: ...

    def installEventFilter(self, filter_obj: QObject, /) -> None: ...  # noqa: N802 - Qt naming


def add_pages(window: PageWindow) -> None:
    for name, text, tip in RAIL:
        window.rail.add(name, text, tip)
    window.rail.add("settings", "Settings",
                    "Settings: KV cache, performance, prompts, data, engines, API (Ctrl+Alt+S)", bottom=True)
    window.rail.finish()
    window.rail.show_current(CHATS)
    window.rail.chosen.connect(lambda name: _chosen(window, name))
    window.host.changed.connect(window.rail.show_current)
    window.host.add("models", lambda: _models(window))
    window.host.add("planner", lambda: _planner(window))
    window.host.add("settings", lambda: _settings(window))
    window.host.changed.connect(lambda name: _shown(window, name))


def _chosen(w: PageWindow, name: str) -> None:
    """A rail button: its page. Chats while Chats is on screen shows or hides the chat list (the way an
    activity bar's active button collapses its side bar): in a narrow window, that is how the list comes out."""
    if name != CHATS:
        w.show_page(name)
    elif w.host.current_name() == CHATS:
        w.toggle_sidebar()
    else:
        w.host.back()


def _shown(window: PageWindow, name: str) -> None:
    toast = window.toast
    if name == CHATS:
        toast.move_to(window.right, window.composer.parentWidget())   # above the message box
    else:
        toast.move_to(window.host)
    if name == "planner":
        from hisho.gui.models.planner_page import PlannerPage

        page = window.host.page("planner")
        if isinstance(page, PlannerPage):
            page.follow_loaded()   # the loaded model, unless a hub file is being planned


def _models(window: PageWindow) -> QWidget:
    from hisho.gui.models.models_page import ModelsPage
    from hisho.gui.shell.remote_switch import offer_remote

    ctx, controller = window.ctx, window.controller
    kv = ctx.kv.session if ctx.kv is not None else None

    def in_use() -> str | None:
        local = ctx.local_engine  # kept while a remote engine answers, its model still mapped
        params = local.load_params if local is not None else None
        return params.model_path if params is not None else None

    page = ModelsPage(ctx.executor, ctx.models, ctx.downloads, load=controller.switch_model, toast=controller.toast,
                      kv=kv, in_use=in_use, state=window.state, back=lambda: window.show_page("chats"))
    window.installEventFilter(page)   # the window's close pauses downloads first
    window._models_page = page
    offer_remote(window, page.hub)    # too big here: "Run on <engine>"
    from hisho.gui.models.planner_page import offer_planning

    offer_planning(window, page.hub)  # a hub file being considered: plan it on the Memory page
    return page


def _planner(window: PageWindow) -> QWidget:
    from hisho.gui.models.planner_page import PlannerPage

    return PlannerPage(window)


def _settings(window: PageWindow) -> QWidget:
    from hisho.gui.settings.preferences import PreferencesDialog

    page = PreferencesDialog(window)
    window._preferences = page
    return page
