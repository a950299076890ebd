"""Extraction: a file path in, a ``Document`` (sections with references) out, or a one-line ``DocumentError``.

Rules of use:
- ``extract(path)`` never returns an empty document: a file with nothing to summarize is an error that says why.
- ``extract_many(paths)`` reads every file it can and reports the rest: one bad file never stops the others.
- ``progress(done, total)`` is called per PDF page, and per block of a DOCX's body (its XML's bytes), so a caller
  can show honest progress on long files; it may raise (``ReadingStopped``) to stop the reading there.
- The type comes from the extension when it is one Hisho reads; otherwise from the content (``sniff``): a PDF or
  DOCX by its signature, text by its bytes (no NULs, a character set that decodes the first 64 KiB cleanly), so a
  README, LICENSE or ``notes.log`` is read as text. Known binary formats (spreadsheets, images, archives) are
  refused by name, with the list of what Hisho reads.
Runs on any thread; touches no Qt and no model.
"""

from __future__ import annotations

import html.parser
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hisho.core.documents.model import Document, DocumentError, PageSpan, Section, file_sha256

log = logging.getLogger("hisho.documents")

Progress = Callable[[int, int], None]

TEXT_SUFFIXES = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown", ".rst": "rst",
                 ".html": "html", ".htm": "html", ".xhtml": "html"}
SUPPORTED = (".pdf", ".docx", *TEXT_SUFFIXES)
# Formats that are never plain text even when a few bytes look like it: refused without reading them.
BINARY_SUFFIXES = frozenset((".xlsx", ".xls", ".ods", ".pptx", ".ppt", ".odp", ".odt", ".doc", ".zip", ".gz",
                             ".tgz", ".bz2", ".xz", ".7z", ".rar", ".png", ".jpg", ".jpeg", ".gif", ".webp",
                             ".bmp", ".tiff", ".mp3", ".mp4", ".wav", ".mov", ".exe", ".dll", ".so", ".bin",
                             ".gguf", ".sqlite", ".db"))
SNIFF_BYTES = 1 << 16
# Plain text sections are cut at blank lines once they pass this size, so references stay precise.
TEXT_SECTION_CHARS = 3000


@dataclass
class Extraction:
    documents: list[Document]
    errors: list[DocumentError]


def extract(path: Path | str, *, password: str | None = None, progress: Progress | None = None,
            pages: PageSpan | None = None) -> Document:
    """``pages``: read only those pages of a PDF (a cut the user asked for: ``Document.cut`` says what was left
    out); other formats have no pages and are read whole."""
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DocumentError(f"{path.name}: no such file ({path})")
    if suffix in BINARY_SUFFIXES:
        raise DocumentError(f"{path.name}: unsupported file type '{suffix}' "
                            "(Hisho reads PDF, DOCX, and text: TXT, MD, RST, HTML or any plain-text file)")
    if path.stat().st_size == 0:
        raise DocumentError(f"{path.name}: the file is empty (0 bytes)")
    if suffix not in SUPPORTED:
        suffix = sniff(path)
    sha = file_sha256(path)
    if suffix == ".pdf":
        from hisho.core.documents.binary import read_pdf

        doc = read_pdf(path, sha, password=password, progress=progress, span=pages)
    elif suffix == ".docx":
        from hisho.core.documents.binary import read_docx

        doc = read_docx(path, sha, progress=progress)
    else:
        doc = read_text_file(path, sha, TEXT_SUFFIXES[suffix])
    if not any(s.text.strip() for s in doc.sections):
        raise DocumentError(f"{path.name}: the file holds no text to summarize")
    log.info("extracted %s: %s, %d sections, %d chars, %d notes", path.name, doc.kind, len(doc.sections),
             doc.chars, len(doc.notes))
    return doc


def extract_many(paths: Iterable[Path | str], *, password: str | None = None,
                 progress: Progress | None = None) -> Extraction:
    out = Extraction([], [])
    for p in paths:
        try:
            out.documents.append(extract(p, password=password, progress=progress))
        except DocumentError as exc:
            log.warning("%s", exc)
            out.errors.append(exc)
    return out


# ----- text formats -------------------------------------------------------------------------------------


def sniff(path: Path) -> str:
    """The type of a file whose extension says nothing, from its first bytes: ".pdf", ".docx", ".html" or
    ".txt"; a ``DocumentError`` naming what it looks like otherwise."""
    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if head.startswith(b"%PDF-"):
        return ".pdf"
    if head.startswith(b"PK\x03\x04"):
        if b"word/" in head:
            return ".docx"
        raise DocumentError(f"{path.name}: this is an archive (ZIP, or an office file other than DOCX), not a "
                            "document Hisho reads (PDF, DOCX or plain text)")
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")) and b"\x00" in head:
        raise DocumentError(f"{path.name}: this looks like a binary file, not text (it holds NUL bytes)")
    cut = head.rfind(b"\n") + 1 if len(head) == SNIFF_BYTES else len(head)  # never judge half a character
    text, _encoding = decode_text(path, head[:cut or len(head)])
    start = text.lstrip()[:200].lower()
    return ".html" if start.startswith(("<!doctype html", "<html")) else ".txt"



def decode_text(path: Path, data: bytes) -> tuple[str, str]:
    """Bytes to text: UTF-8 (with or without BOM) first, else charset-normalizer's best guess.

    Binary data (NUL bytes outside UTF-16, or no charset that decodes it cleanly) is refused, so a renamed
    executable or image is never "summarized".
    """
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", "replace"), "utf-8-sig"
    try:
        text = data.decode("utf-8")
        if "\x00" not in text:
            return text, "utf-8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data[: 1 << 20]).best()
    if best is None or best.encoding is None:
        raise DocumentError(f"{path.name}: this looks like a binary file, not text (no character set decodes it)")
    text = data.decode(best.encoding, "replace")
    controls = sum(1 for ch in text[:65536] if ch < " " and ch not in "\t\n\r\f\v")
    if "\x00" in text or controls > len(text[:65536]) * 0.01:
        raise DocumentError(f"{path.name}: this looks like a binary file, not text (it holds control bytes)")
    return text, best.encoding


def read_text_file(path: Path, sha: str, kind: str) -> Document:
    text, encoding = decode_text(path, path.read_bytes())
    doc = Document(path=path, kind=kind, sha256=sha, encoding=encoding)
    if encoding not in ("utf-8", "utf-8-sig", "ascii"):
        log.info("%s read as %s", path.name, encoding)
    if kind == "html":
        doc.sections, skipped = html_sections(text)
        if skipped:
            doc.notes.append(f"{path.name}: {skipped} embedded images/objects were not read")
    elif kind == "markdown":
        doc.sections = markdown_sections(text)
    elif kind == "rst":
        doc.sections = heading_sections(text, _rst_heading)
    else:
        doc.sections = paragraph_sections(text)
    return doc


def paragraph_sections(text: str, first_line: int = 1, ref: str = "") -> list[Section]:
    """Cut text at blank lines into sections of about TEXT_SECTION_CHARS; ref "line N" unless given."""
    out: list[Section] = []
    buf: list[str] = []
    start = line_no = first_line
    size = 0
    for line in text.splitlines():
        if not buf and not line.strip():
            line_no += 1
            start = line_no
            continue
        buf.append(line)
        size += len(line) + 1
        line_no += 1
        if size >= TEXT_SECTION_CHARS and not line.strip():
            out.append(Section("\n".join(buf).strip(), ref or f"line {start}"))
            buf, size, start = [], 0, line_no
    if "".join(buf).strip():
        out.append(Section("\n".join(buf).strip(), ref or f"line {start}"))
    return out


_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>:_.])\1{2,}\s*$")


def _rst_heading(lines: list[str], i: int) -> str | None:
    if i + 1 < len(lines) and lines[i].strip() and _RST_UNDERLINE.match(lines[i + 1]):
        if len(lines[i + 1].strip()) >= len(lines[i].strip()):
            return lines[i].strip()
    return None


def heading_sections(text: str, heading: Callable[[list[str], int], str | None]) -> list[Section]:
    """Split at headings; each heading's text is the ref ("§ Title") of what follows it."""
    lines = text.splitlines()
    out: list[Section] = []
    title, body = "", list[str]()
    i = 0
    while i < len(lines):
        h = heading(lines, i)
        if h is not None:
            out.extend(_body_sections(title, body))
            title, body = h, [lines[i]]
            i += 2 if heading is _rst_heading else 1
            continue
        body.append(lines[i])
        i += 1
    out.extend(_body_sections(title, body))
    return out


def markdown_sections(text: str) -> list[Section]:
    """Split Markdown at its top-level headings as markdown-it-py parses them (CommonMark: ``#`` and setext
    headings; a ``# line`` inside a code fence or an indented block is code, not a heading). Each heading's text
    is the ref ("§ Title") of what follows it, the heading line included."""
    from markdown_it import MarkdownIt

    text = text.replace("\r\n", "\n").replace("\r", "\n")  # markdown-it counts lines by "\n" alone
    tokens = MarkdownIt("commonmark").parse(text)
    heads = [(tok.map[0], tokens[i + 1].content.strip()) for i, tok in enumerate(tokens)
             if tok.type == "heading_open" and tok.level == 0 and tok.map is not None]
    lines = text.split("\n")
    out = _body_sections("", lines[:heads[0][0]] if heads else lines)
    for n, (start, title) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        out.extend(_body_sections(title, lines[start:end]))
    return out


def _body_sections(title: str, body: list[str]) -> list[Section]:
    text = "\n".join(body).strip()
    if not text:
        return []
    ref = f"§ {title}" if title else ""
    return paragraph_sections(text, ref=ref) if ref else paragraph_sections(text)


class _HtmlText(html.parser.HTMLParser):
    SKIP = {"script", "style", "head", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "br", "li", "tr", "section", "article", "table", "ul", "ol", "blockquote", "pre"}
    EMBEDS = {"img", "video", "audio", "iframe", "object", "embed", "canvas"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str, list[str]]] = [("", [])]
        self.skip_depth = 0
        self.in_heading = False
        self.heading: list[str] = []
        self.embeds = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skip_depth += 1
        elif tag in ("h1", "h2", "h3", "h4"):
            self.in_heading, self.heading = True, []
        elif tag in self.EMBEDS:
            self.embeds += 1
        if tag in self.BLOCK:
            self.sections[-1][1].append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skip_depth:
            self.skip_depth -= 1
        elif tag in ("h1", "h2", "h3", "h4") and self.in_heading:
            self.in_heading = False
            title = " ".join("".join(self.heading).split())
            self.sections.append((title, [title, "\n"]))
        elif tag in self.BLOCK:
            self.sections[-1][1].append("\n")

    def handle_data(self, data: str) -> None:
        if self.skip_depth:
            return
        (self.heading if self.in_heading else self.sections[-1][1]).append(data)


def html_sections(text: str) -> tuple[list[Section], int]:
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    out: list[Section] = []
    for title, parts in parser.sections:
        body = re.sub(r"[ \t]+", " ", "".join(parts))
        body = re.sub(r"\n\s*\n+", "\n\n", body).strip()
        out.extend(_body_sections(title, body.splitlines()))
    return out, parser.embeds
