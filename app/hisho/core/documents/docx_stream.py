"""DOCX text read straight off the zip's XML stream: paragraphs, headings and tables in body order.

A DOCX is a zip of XML parts. The main part (found through ``_rels/.rels``) is fed to expat a block at a time as
it inflates, and a small state machine keeps only what a summary needs: each body paragraph's text, whether its
style is a heading, and each table as " | "-joined rows. Nothing else is built (no element tree, no object per
paragraph or run), so memory is the text itself plus one block, and the time is one expat pass over the XML.
``binary.check_docx`` has already refused oversized parts, too many elements and any DTD; the parser here also
refuses a DOCTYPE itself so it never expands an entity, whoever calls it.

What is read, following Word's model: ``w:t`` text, ``w:tab``/``w:ptab`` as a tab, ``w:br``/``w:cr`` as a line
break, ``w:noBreakHyphen`` as "-". Deleted text (``w:delText``) is not text of the document; text boxes
(``w:txbxContent``) are left out, as each is written twice (``mc:AlternateContent`` choice and fallback).
Pictures are counted (``wp:inline``/``wp:anchor``) so the caller can say they were not read.
"""

from __future__ import annotations

import logging
import posixpath
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO
from xml.parsers import expat

log = logging.getLogger("hisho.documents")

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
WP = "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_OFFICE_DOC = "/officeDocument"
_STYLES = "/styles"
_BLOCK = 1 << 20
_SEP = "}"  # expat joins namespace and local name with this: "uri}local"

_P, _T, _TBL, _TR, _TC = f"{W}}}p", f"{W}}}t", f"{W}}}tbl", f"{W}}}tr", f"{W}}}tc"
_BODY, _PSTYLE, _TXBX = f"{W}}}body", f"{W}}}pStyle", f"{W}}}txbxContent"
_BREAKS = {f"{W}}}tab": "\t", f"{W}}}ptab": "\t", f"{W}}}br": "\n", f"{W}}}cr": "\n", f"{W}}}noBreakHyphen": "-"}
_PICTURES = {f"{WP}}}inline", f"{WP}}}anchor"}


class DocxFormatError(Exception):
    """The package or its XML is not a readable Word document (the message says what failed)."""


class DocxDeadline(Exception):
    """Reading ran past the caller's deadline."""


@dataclass
class DocxText:
    blocks: list[tuple[str, str]] = field(default_factory=list)  # ("heading" | "text", text) in body order
    pictures: int = 0


def read_docx_text(path: str, *, deadline: float | None = None,
                   progress: Callable[[int, int], None] | None = None) -> DocxText:
    """The body of a DOCX as blocks. Raises ``DocxFormatError`` for a damaged package or XML, ``DocxDeadline``
    when ``deadline`` (a ``time.monotonic`` value) passes. ``progress(done, total)``: bytes of the body's XML
    parsed so far, after every block."""
    try:
        with zipfile.ZipFile(path) as zf:
            main = _main_part(zf)
            headings = _heading_styles(zf, main)
            walker = _BodyWalker(headings, deadline)
            total = zf.getinfo(main).file_size
            with zf.open(main) as fh:
                _feed(fh, walker, total, progress)
            return walker.out
    except KeyError as exc:
        raise DocxFormatError(f"missing part {exc}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise DocxFormatError(str(exc)) from None


def _new_parser() -> expat.XMLParserType:
    parser = expat.ParserCreate(namespace_separator=_SEP)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def refuse(*_args: object) -> None:
        raise DocxFormatError("the XML holds a DTD, which Word never writes")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.buffer_text = True
    return parser


def _feed(fh: IO[bytes], walker: _BodyWalker, total: int = 0,
          progress: Callable[[int, int], None] | None = None) -> None:
    parser = _new_parser()
    parser.StartElementHandler = walker.start
    parser.EndElementHandler = walker.end
    parser.CharacterDataHandler = walker.chars
    done = 0
    try:
        while block := fh.read(_BLOCK):
            parser.Parse(block, False)
            walker.check_deadline()
            done += len(block)
            if progress is not None:
                progress(min(done, total), total)
        parser.Parse(b"", True)
    except expat.ExpatError as exc:
        raise DocxFormatError(f"broken XML: {exc}") from None


def _small_part(zf: zipfile.ZipFile, name: str, on_start: Callable[[str, dict[str, str]], None]) -> None:
    """Parse a small part (relationships, styles) with only a start-tag handler."""
    parser = _new_parser()
    parser.StartElementHandler = on_start
    try:
        with zf.open(name) as fh:
            while block := fh.read(_BLOCK):
                parser.Parse(block, False)
        parser.Parse(b"", True)
    except expat.ExpatError as exc:
        raise DocxFormatError(f"broken XML in {name}: {exc}") from None


def _relationships(zf: zipfile.ZipFile, rels_name: str, base: str) -> dict[str, str]:
    """Relationship type suffix ("/officeDocument", "/styles") -> part name inside the zip."""
    found: dict[str, str] = {}
    if rels_name not in zf.namelist():
        return found

    def start(tag: str, attrs: dict[str, str]) -> None:
        if tag == f"{_REL_NS}}}Relationship" and attrs.get("TargetMode") != "External":
            kind = attrs.get("Type", "").rsplit("/", 1)[-1]
            target = attrs.get("Target", "")
            name = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
            found.setdefault("/" + kind, name)

    _small_part(zf, rels_name, start)
    return found


def _main_part(zf: zipfile.ZipFile) -> str:
    main = _relationships(zf, "_rels/.rels", "").get(_OFFICE_DOC, "word/document.xml")
    zf.getinfo(main)  # KeyError: no main document
    return main


def _heading_styles(zf: zipfile.ZipFile, main: str) -> frozenset[str]:
    """Style ids whose style name is a heading or the title (Word's "heading 1".."heading 9", "Title")."""
    folder, leaf = posixpath.split(main)
    styles = _relationships(zf, posixpath.join(folder, "_rels", leaf + ".rels"), folder).get(
        _STYLES, posixpath.join(folder, "styles.xml"))
    ids: set[str] = set()
    if styles not in zf.namelist():
        return frozenset(ids)
    current: list[str] = [""]

    def start(tag: str, attrs: dict[str, str]) -> None:
        if tag == f"{W}}}style":
            current[0] = attrs.get(f"{W}}}styleId", "")
        elif tag == f"{W}}}name" and current[0]:
            if attrs.get(f"{W}}}val", "").lower().startswith(("heading", "title")):
                ids.add(current[0])

    _small_part(zf, styles, start)
    return frozenset(ids)


class _BodyWalker:
    """Expat callbacks that turn the body's element stream into blocks, keeping only the current paragraph's
    text, the open tables' rows and a count of open text boxes."""

    _CHECK_EVERY = 4096

    def __init__(self, headings: frozenset[str], deadline: float | None) -> None:
        self.out = DocxText()
        self.headings = headings
        self.deadline = deadline
        self.body_depth = 0      # >0 inside w:body
        self.para_depth = 0      # nesting of w:p (a text box's paragraphs sit inside a paragraph's run)
        self.textbox = 0
        self.in_text = False
        self.para: list[str] = []
        self.style = ""
        # Open tables, innermost last: rows of cells of paragraph texts.
        self.tables: list[list[list[str]]] = []
        self.cell: list[list[str]] = []
        self.events = 0

    def check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DocxDeadline

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.events += 1
        if self.events % self._CHECK_EVERY == 0:
            self.check_deadline()
        if tag == _BODY:
            self.body_depth += 1
        if not self.body_depth:
            return
        if tag == _TXBX:
            self.textbox += 1
        if self.textbox:
            return
        if tag == _T:
            self.in_text = self.para_depth > 0
        elif tag in _BREAKS:
            if self.para_depth:
                self.para.append(_BREAKS[tag])
        elif tag == _P:
            self.para_depth += 1
            if self.para_depth == 1:
                self.para, self.style = [], ""
        elif tag == _PSTYLE:
            self.style = attrs.get(f"{W}}}val", "")
        elif tag == _TBL:
            self.tables.append([])
        elif tag == _TR and self.tables:
            self.tables[-1].append([])
        elif tag == _TC:
            self.cell.append([])
        elif tag in _PICTURES:
            self.out.pictures += 1

    def end(self, tag: str) -> None:
        if tag == _BODY:
            self.body_depth -= 1
        if not self.body_depth:
            return
        if tag == _TXBX:
            self.textbox -= 1
            return
        if self.textbox:
            return
        if tag == _T:
            self.in_text = False
        elif tag == _P and self.para_depth:
            self.para_depth -= 1
            if not self.para_depth:
                self._paragraph("".join(self.para).strip())
        elif tag == _TC and self.cell:
            text = "\n".join(p for p in self.cell.pop() if p)
            if self.tables and self.tables[-1]:
                self.tables[-1][-1].append(text)
        elif tag == _TBL and self.tables:
            rows = self.tables.pop()
            text = "\n".join(" | ".join(row) for row in rows)
            if self.cell:  # a table inside a cell: its rows are that cell's text
                self.cell[-1].append(text)
            else:
                self.out.blocks.append(("text", text))

    def chars(self, data: str) -> None:
        if self.in_text and not self.textbox:
            self.para.append(data)

    def _paragraph(self, text: str) -> None:
        if self.cell:
            self.cell[-1].append(text)
            return
        kind = "heading" if text and self.style in self.headings else "text"
        self.out.blocks.append((kind, text))
