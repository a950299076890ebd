"""The window's pages and its rail: which pages there are, how each is built, and what opening one does.

Rules of use: ``add_pages(window)`` once, from the window's constructor after the menus. Each page is built the
first time it is shown and kept: Models (``hisho.gui.models.models_page``), the Memory planner
(``hisho.gui.models.planner_page``) and Settings (``hisho.gui.settings.preferences``). The openers other code
calls (``open_models``, ``open_planner``, ``open_preferences``) show these pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtWidgets import QWidget

from hisho.gui.shell.pages import CHATS, NavRail, PageHost

if TYPE_CHECKING:
    from hisho.gui.shell.context import AppContext
    from hisho.gui.shell.controller import ChatController

RAIL = ((CHATS, "Chats", "Chats (Ctrl+1); again: show or hide the chat list (Ctrl+B)"), ("models", "Models", "Models: installed, Hub, downloads (Ctrl+M)"),
        ("planner", "Memory", "Memory planner: what fits this computer (Ctrl+P)"))


class PageWindow(Protocol):
    """What the pages' builders use of the main window."""

    @property
    def ctx(self) -> AppContext: ...

    @property
    def controller(self) -> ChatController: ...

    @property
    def host(self) -> PageHost: ...

    @property
    def rail(self) -> NavRail: ...

    def show_page(self, name: str) -> QWidget: ...

    def toggle_sidebar(self) -> None: ...


def add_pages(window: Any) -> None:
    w: PageWindow = window
    for name, text, tip in RAIL:
        w.rail.add(name, text, tip)
    w.rail.add("settings", "Settings", "Settings: KV cache, performance, prompts, data, engines, API (Ctrl+Alt+S)",
               bottom=True)
    w.rail.finish()
    w.rail.show_current(CHATS)
    w.rail.chosen.connect(lambda name: _chosen(w, name))
    w.host.changed.connect(w.rail.show_current)
    w.host.add("models", lambda: _models(window))
    w.host.add("planner", lambda: _planner(window))
    w.host.add("settings", lambda: _settings(window))
    w.host.changed.connect(lambda name: _shown(window, name))


def _chosen(w: PageWindow, name: str) -> None:
    """A rail button: its page. Chats while Chats is on screen shows or hides the chat list (the way an
    activity bar's active button collapses its side bar): in a narrow window, that is how the list comes out."""
    if name != CHATS:
        w.show_page(name)
    elif w.host.current_name() == CHATS:
        w.toggle_sidebar()
    else:
        w.host.back()


def _shown(window: Any, name: str) -> None:
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


def _models(window: Any) -> QWidget:
    from hisho.gui.models.models_page import ModelsPage
    from hisho.gui.shell.remote_switch import offer_remote

    ctx, controller = window.ctx, window.controller
    kv = ctx.kv.session if ctx.kv is not None else None

    def in_use() -> str | None:
        local = ctx.local_engine  # kept while a remote engine answers, its model still mapped
        params = local.load_params if local is not None else None
        return params.model_path if params is not None else None

    page = ModelsPage(ctx.executor, load=controller.switch_model, toast=controller.toast, kv=kv, in_use=in_use)
    window.installEventFilter(page)   # the window's close pauses downloads first
    window._models_page = page
    offer_remote(window, page.hub)    # too big here: "Run on <engine>"
    from hisho.gui.models.planner_page import offer_planning

    offer_planning(window, page.hub)  # a hub file being considered: plan it on the Memory page
    return page


def _planner(window: Any) -> QWidget:
    from hisho.gui.models.planner_page import PlannerPage

    return PlannerPage(window)


def _settings(window: Any) -> QWidget:
    from hisho.gui.settings.preferences import PreferencesDialog

    page = PreferencesDialog(window)
    window._preferences = page
    return page
