"""Light and dark themes. The window follows the system colour scheme unless the ``theme`` setting forces one.

A theme is a small palette; the stylesheet and the code-highlighting style are derived from it, so widgets ask
``current()`` for colours instead of hard-coding them.

Icons drawn in code (the paperclip) are pixmaps of one colour, which a style sheet cannot recolour: whoever
draws one registers the drawing with ``follow(owner, draw)``, which draws it now in the current theme and again
after every ``apply``, for as long as ``owner`` lives. (A widget's ``palette()`` is no guide at creation: a style
sheet's colours reach it only when it is polished, so an icon drawn from it came out in the other theme's ink.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import shiboken6
from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication


@dataclass(frozen=True)
class Theme:
    name: str
    bg: str
    sidebar: str
    surface: str
    text: str
    muted: str
    border: str
    accent: str
    accent_text: str
    user_bubble: str
    code_bg: str
    hover: str
    selected: str
    warn: str
    error: str
    pygments_style: str

    @property
    def dark(self) -> bool:
        return self.name == "dark"


LIGHT = Theme("light", bg="#ffffff", sidebar="#f4f4f6", surface="#ffffff", text="#1f2328", muted="#6b7280",
              border="#e4e4e9", accent="#4f46e5", accent_text="#ffffff", user_bubble="#eef0ff",
              code_bg="#f6f8fa", hover="#e9e9ee", selected="#e0e2fb", warn="#b45309", error="#b91c1c",
              pygments_style="default")
DARK = Theme("dark", bg="#1c1d21", sidebar="#151619", surface="#24252a", text="#e7e7ea", muted="#9a9ca5",
             border="#303138", accent="#8b8ff8", accent_text="#111216", user_bubble="#2c2e45",
             code_bg="#121316", hover="#26272d", selected="#2f3150", warn="#f59e0b", error="#f87171",
             pygments_style="monokai")

_current = LIGHT
_followers: dict[int, tuple[QObject, Callable[[Theme], None]]] = {}


def current() -> Theme:
    return _current


def follow(owner: QObject, draw: Callable[[Theme], None]) -> None:
    """``draw(theme)`` now and after every theme change, until ``owner`` is destroyed (GUI thread)."""
    key = id(owner)
    _followers[key] = (owner, draw)
    owner.destroyed.connect(lambda *_: _followers.pop(key, None))
    draw(_current)


def _redraw(theme: Theme) -> None:
    for key, (owner, draw) in list(_followers.items()):
        if shiboken6.isValid(owner):
            draw(theme)
        else:
            _followers.pop(key, None)


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme() if hasattr(hints, "colorScheme") else Qt.ColorScheme.Unknown
    return bool(scheme == Qt.ColorScheme.Dark)


def choose(setting: str) -> Theme:
    if setting == "dark":
        return DARK
    if setting == "light":
        return LIGHT
    return DARK if system_is_dark() else LIGHT


def apply(app: QApplication, theme: Theme) -> None:
    global _current
    _current = theme
    pal = QPalette()
    for role, colour in ((QPalette.ColorRole.Window, theme.bg), (QPalette.ColorRole.Base, theme.surface),
                         (QPalette.ColorRole.Text, theme.text), (QPalette.ColorRole.WindowText, theme.text),
                         (QPalette.ColorRole.Button, theme.surface), (QPalette.ColorRole.ButtonText, theme.text),
                         (QPalette.ColorRole.Highlight, theme.accent),
                         (QPalette.ColorRole.HighlightedText, theme.accent_text),
                         (QPalette.ColorRole.PlaceholderText, theme.muted), (QPalette.ColorRole.Link, theme.accent),
                         (QPalette.ColorRole.ToolTipBase, theme.surface), (QPalette.ColorRole.ToolTipText, theme.text),
                         (QPalette.ColorRole.AlternateBase, theme.sidebar)):
        pal.setColor(role, QColor(colour))
    # setColor(role, …) sets every colour group, the disabled one too: a disabled menu item or button then looked
    # exactly like an enabled one (Chat → Stop where nothing runs). Disabled text is muted.
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, role, QColor(theme.muted))
    app.setStyle("Fusion")  # the same look everywhere; the palette above colours it
    app.setPalette(pal)
    app.setStyleSheet(stylesheet(theme))
    _redraw(theme)


def stylesheet(t: Theme) -> str:
    return f"""
QMainWindow, QDialog {{ background: {t.bg}; color: {t.text}; }}
QWidget {{ color: {t.text}; }}
QWidget:disabled, QMenu::item:disabled {{ color: {t.muted}; }}
QToolTip {{ background: {t.surface}; color: {t.text}; border: 1px solid {t.border}; padding: 4px; }}
#Sidebar {{ background: {t.sidebar}; border-right: 1px solid {t.border}; }}
#Brand {{ font-size: 15pt; font-weight: 600; }}
#SidebarSearch, QLineEdit {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px;
    padding: 6px 9px; selection-background-color: {t.accent}; }}
QLineEdit:focus, #ComposerFrame[focused="true"] {{ border: 1px solid {t.accent}; }}
#ConversationList {{ background: transparent; border: none; outline: none; }}
#ConversationList::item {{ padding: 7px 10px; border-radius: 7px; margin: 1px 6px; }}
#ConversationList::item:hover {{ background: {t.hover}; }}
#ConversationList::item:selected {{ background: {t.selected}; color: {t.text}; }}
#Header {{ background: {t.bg}; border-bottom: 1px solid {t.border}; }}
#HeaderTitle {{ font-size: 12pt; font-weight: 600; }}
#ChatScroll, #ChatColumnHost {{ background: {t.bg}; border: none; }}
#UserBubble {{ background: {t.user_bubble}; border-radius: 14px; }}
#AssistantBody {{ background: transparent; }}
#RoleLabel {{ font-weight: 600; }}
#Meta, #Hint, #TokenCount {{ color: {t.muted}; font-size: 8.5pt; }}
#Marker {{ color: {t.warn}; font-size: 8.5pt; font-weight: 600; }}
#ErrorMarker {{ color: {t.error}; font-size: 8.5pt; font-weight: 600; }}
QFrame#ThinkingBlock {{ border: none; border-left: 3px solid {t.selected}; }}
QPushButton#ThinkingHeader {{ background: transparent; border: none; color: {t.muted}; padding: 2px 0;
    font-weight: 600; text-align: left; }}
QPushButton#ThinkingHeader:hover {{ color: {t.text}; }}
#ThinkingText {{ color: {t.muted}; }}
#EditBanner {{ background: {t.selected}; border-radius: 8px; }}
#CodeBlock {{ background: {t.code_bg}; border: 1px solid {t.border}; border-radius: 8px; }}
#CodeHeader {{ color: {t.muted}; font-size: 8.5pt; border-bottom: 1px solid {t.border}; }}
QPushButton {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 7px; padding: 5px 12px; }}
QPushButton:hover {{ background: {t.hover}; }}
QPushButton#Primary, QPushButton#SendButton {{ background: {t.accent}; color: {t.accent_text}; border: none;
    font-weight: 600; }}
QPushButton#SendButton:disabled, QPushButton#Primary:disabled {{ background: {t.border}; color: {t.muted}; }}
QPushButton#StopButton {{ background: {t.text}; color: {t.bg}; border: none; font-weight: 600; }}
QPushButton#Flat, QToolButton#Flat {{ background: transparent; border: none; color: {t.muted}; padding: 2px 6px;
    border-radius: 5px; }}
QPushButton#Flat:hover, QToolButton#Flat:hover {{ background: {t.hover}; color: {t.text}; }}
QPushButton#Chip {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 14px; padding: 8px 14px;
    text-align: left; }}
QPushButton#Chip:hover {{ border-color: {t.accent}; }}
#ComposerFrame {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 14px; }}
#ComposerFrame[dropping="true"] {{ border: 2px dashed {t.accent}; }}
#DocChip {{ background: {t.hover}; border: 1px solid {t.border}; border-radius: 10px; }}
#DemoCard {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 12px; }}
#Composer {{ background: transparent; border: none; }}
#Banner {{ background: {t.warn}; color: #ffffff; padding: 6px 12px; }}
#SummaryBanner {{ background: {t.warn}; color: {'#1c1d21' if t.dark else '#ffffff'}; border-radius: 8px; padding: 8px 12px; font-weight: 600; }}
#GroundingNote {{ color: {t.warn}; font-size: 8.5pt; font-weight: 600; }}
#EmptyTitle {{ font-size: 22pt; font-weight: 600; }}
#EmptySubtitle {{ color: {t.muted}; font-size: 11pt; }}
#FindBar {{ background: {t.sidebar}; border-bottom: 1px solid {t.border}; }}
QProgressBar#ContextMeter {{ background: {t.hover}; border: none; border-radius: 3px; max-height: 6px; }}
QProgressBar#ContextMeter::chunk {{ background: {t.accent}; border-radius: 3px; }}
QProgressBar#ContextMeter[warn="true"]::chunk {{ background: {t.warn}; }}
QStatusBar {{ background: {t.sidebar}; border-top: 1px solid {t.border}; color: {t.muted}; }}
QStatusBar QLabel {{ color: {t.muted}; padding: 0 8px; }}
QPlainTextEdit {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 7px; padding: 4px; }}
#DialogTitle {{ font-size: 13pt; font-weight: 600; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 2px; }}
QScrollBar::handle:vertical {{ background: {t.border}; border-radius: 4px; min-height: 30px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; width: 0; }}
QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 2px; }}
QScrollBar::handle:horizontal {{ background: {t.border}; border-radius: 4px; min-width: 30px; }}
QMenu {{ background: {t.surface}; border: 1px solid {t.border}; padding: 4px; }}
QMenu::item {{ padding: 5px 22px; border-radius: 5px; }}
QMenu::item:selected {{ background: {t.selected}; }}
#Toast {{ background: {t.text}; border-radius: 10px; }}
#Toast QLabel#ToastText {{ color: {t.bg}; }}
#Toast QPushButton#ToastAction {{ background: transparent; color: {t.bg}; border: 1px solid {t.muted};
    font-weight: 600; padding: 4px 12px; }}
#Toast QPushButton#Flat {{ color: {t.bg}; }}
#Toast QPushButton#Flat:hover, #Toast QPushButton#ToastAction:hover {{ background: {t.muted}; }}
QPushButton#JumpButton {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 14px;
    padding: 5px 14px; color: {t.text}; }}
QMenuBar {{ background: {t.bg}; }}
QMenuBar::item:selected {{ background: {t.hover}; }}
#NavRail {{ background: {t.sidebar}; border-right: 1px solid {t.border}; }}
QPushButton#RailButton {{ background: transparent; border: none; border-radius: 8px; padding: 9px 2px;
    color: {t.muted}; font-size: 8.5pt; font-weight: 600; }}
QPushButton#RailButton:hover {{ background: {t.hover}; color: {t.text}; }}
QPushButton#RailButton:checked {{ background: {t.selected}; color: {t.text}; }}
#Sidebar[drawer="true"] {{ border-right: 2px solid {t.accent}; }}
#PageTitle {{ font-size: 15pt; font-weight: 600; }}
#PlannerSubject {{ font-size: 11pt; }}
QListWidget#SettingsNav {{ background: {t.sidebar}; border: 1px solid {t.border}; border-radius: 8px; }}
QListWidget#SettingsNav::item {{ padding: 6px 8px; }}
QListWidget#SettingsNav::item:selected {{ background: {t.selected}; color: {t.text}; }}
{focus_rules(t)}
"""


def focus_rules(t: Theme) -> str:
    """Keyboard focus drawn on every button: a style sheet that gives a button a border also takes Fusion's
    focus frame away, which left focus invisible (in the dark theme most of all). The ring is 2 px in a colour
    that stands out from the button's own: the accent on plain buttons, the text colour on accent buttons.
    Padding shrinks by the border's extra pixel so a focused button keeps its size."""
    return f"""QPushButton:focus, QToolButton:focus {{ border: 2px solid {t.accent}; padding: 4px 11px; }}
QPushButton#Flat:focus, QToolButton#Flat:focus, QPushButton#RailButton:focus {{ border: 2px solid {t.accent};
    padding: 0px 4px; }}
QPushButton#RailButton:focus {{ padding: 7px 0px; }}
QPushButton#Primary:focus, QPushButton#SendButton:focus, QPushButton#StopButton:focus {{
    border: 2px solid {t.text}; padding: 3px 10px; }}
QPushButton#Chip:focus {{ border: 2px solid {t.accent}; padding: 7px 13px; }}
#Toast QPushButton:focus {{ border: 2px solid {t.bg}; }}"""
