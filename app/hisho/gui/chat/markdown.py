"""Markdown -> display segments: runs of rich text (HTML for Qt's rich-text subset) and code blocks.

markdown-it-py parses (CommonMark + tables + strikethrough); top-level fenced and indented code blocks become
``Segment(kind="code")`` so the view can give each its own box with a Copy button; everything between them is
rendered to one HTML segment. Code is highlighted by pygments with inline styles (Qt's rich text has no CSS
classes). Raw HTML in model output is escaped, never rendered. Pure functions; no widgets here.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound

from hisho.gui.shell.theme import Theme


@dataclass(frozen=True)
class Segment:
    kind: str          # "html" or "code"
    html: str
    code: str = ""
    language: str = ""


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
        ["table", "strikethrough"])


def render(text: str, theme: Theme) -> list[Segment]:
    md = _parser()
    tokens = md.parse(text)
    segments: list[Segment] = []
    run: list[Any] = []

    def flush() -> None:
        if run:
            body = md.renderer.render(run, md.options, {})
            segments.append(Segment("html", _style_html(body, theme)))
            run.clear()

    for tok in tokens:
        if tok.type in ("fence", "code_block") and tok.level == 0:
            flush()
            lang = (tok.info or "").strip().split(" ")[0].lower()
            code = tok.content.rstrip("\n")
            segments.append(Segment("code", highlight_code(code, lang, theme), code, lang))
        else:
            run.append(tok)
    flush()
    return segments


def stable_prefix(text: str) -> int:
    """Length of the part of a still-growing Markdown text whose blocks are finished: up to the last blank line
    that is not inside a fenced code block. What follows can still change how it renders; what precedes it
    cannot (except for link references and loose lists, which the final whole render restores)."""
    cut = 0
    fence = ""
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif not stripped and line.endswith("\n"):
            cut = pos + len(line)
        pos += len(line)
    return cut


def highlight_code(code: str, language: str, theme: Theme) -> str:
    """Highlighted HTML of ``code`` wrapped in a <pre> that keeps spacing (inline styles only)."""
    inner = _highlighted(code, language, theme.pygments_style)
    return (f'<pre style="margin:0; white-space:pre-wrap; font-family:\'DejaVu Sans Mono\',monospace; '
            f'color:{theme.text};">{inner}</pre>')


@lru_cache(maxsize=256)
def _highlighted(code: str, language: str, style: str) -> str:
    try:
        lexer = get_lexer_by_name(language) if language else guess_lexer(code)
    except ClassNotFound:
        return html.escape(code)
    if not language and lexer.name == "Text only":
        return html.escape(code)
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style=style)
    return str(highlight(code, lexer, formatter)).rstrip("\n")


def _style_html(body: str, t: Theme) -> str:
    """Qt's rich text ignores most CSS in a <style> block for tables/code; add the look inline."""
    mono = "font-family:'DejaVu Sans Mono',monospace"
    body = body.replace("<code>", f'<code style="{mono}; background-color:{t.code_bg};">')
    body = body.replace("<table>", f'<table cellspacing="0" cellpadding="6" border="1" '
                                   f'style="border-color:{t.border}; border-collapse:collapse;">')
    body = body.replace("<th>", f'<th style="background-color:{t.code_bg}; text-align:left;">')
    body = re.sub(r'<th style="text-align:(\w+)">',
                  rf'<th style="background-color:{t.code_bg}; text-align:\1;">', body)
    body = body.replace("<blockquote>", f'<blockquote style="color:{t.muted}; margin-left:12px;">')
    body = body.replace("<a href=", f'<a style="color:{t.accent};" href=')
    return body.strip()


def plain_text(segments: list[Segment]) -> str:
    return "\n".join(s.code if s.kind == "code" else html.unescape(re.sub("<[^>]+>", "", s.html))
                     for s in segments)
