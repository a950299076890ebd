"""PDF (pypdfium2) and DOCX (zip + streamed XML) readers.

PDF pages are read one at a time and closed at once: a 500-page file holds one page's native objects at a time,
and only its text is kept. A page without text that shows images is a scanned page: it is left out and listed
in the notes; a PDF where every page is like that is refused with a hint to run OCR.

A DOCX is a zip of XML, and a small file can expand into gigabytes (a 1.5 MB file to 1.5 GB) or into millions
of paragraphs. ``check_docx`` looks at the zip directory and streams the XML parts, counting tags (nothing kept,
a few MiB of memory), before the text is read: uncompressed sizes, element count and a time budget, each with a
one-line refusal. The text itself is read by ``docx_stream`` in one pass over the streamed XML (no object model;
docs/summarization.md says why).
"""

from __future__ import annotations

import logging
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from hisho.core.documents.model import Document, DocumentError, PageSpan, PasswordNeeded, Section, page_range

log = logging.getLogger("hisho.documents")

_PDFIUM_PASSWORD_ERROR = 4  # FPDF_ERR_PASSWORD
_PDFIUM_IMAGE_OBJECT = 3    # FPDF_PAGEOBJ_IMAGE


def read_pdf(path: Path, sha: str, *, password: str | None = None,
             progress: object = None, span: PageSpan | None = None) -> Document:
    """``span``: only those pages are opened (the rest are named in ``cut`` and the notes)."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(path), password=password)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == _PDFIUM_PASSWORD_ERROR:
            if password:
                raise PasswordNeeded(f"{path.name}: wrong password for this encrypted PDF", wrong=True) from None
            raise PasswordNeeded(f"{path.name}: the PDF is encrypted; give its password (--password) or "
                                 "save an unencrypted copy", wrong=False) from None
        raise DocumentError(f"{path.name}: the PDF is damaged and cannot be read ({exc})") from None
    doc = Document(path=path, kind="pdf", sha256=sha)
    image_pages: list[int] = []
    try:
        total = len(pdf)
        doc.pages = total
        wanted = span.clamp(total) if span is not None else range(total)
        if span is not None:
            _note_cut(doc, span, wanted)
        for done, index in enumerate(wanted, start=1):
            text, has_images = _page_text(pdf, index)
            if text.strip():
                doc.sections.append(Section(text.strip(), f"p. {index + 1}", index + 1))
            elif has_images:
                image_pages.append(index + 1)
            if callable(progress):
                progress(done, len(wanted))
    except pdfium.PdfiumError as exc:
        raise DocumentError(f"{path.name}: the PDF is damaged and cannot be read ({exc})") from None
    finally:
        pdf.close()
    if not doc.sections:
        if image_pages:
            raise DocumentError(f"{path.name}: the PDF has no text layer ({len(image_pages)} pages of images, "
                                "e.g. a scan); run OCR on it first (for example ocrmypdf) and summarize the result")
        raise DocumentError(f"{path.name}: the PDF holds no text ({doc.pages} blank pages)")
    if image_pages:
        doc.notes.append(f"{path.name}: {page_range(image_pages)} have no text layer (images only, e.g. scanned); "
                         "they are not in the summary (run OCR to include them)")
    return doc


def _note_cut(doc: Document, span: PageSpan, wanted: range) -> None:
    name = doc.path.name
    if not wanted:
        raise DocumentError(f"{name}: --pages {span} is past the end (the PDF has {doc.pages} pages)")
    skipped = [p for p in range(1, doc.pages + 1) if p - 1 not in wanted]
    if skipped:
        doc.cut = page_range(skipped)
        doc.notes.append(f"{name}: {doc.cut} not read, as asked (--pages {span})")


def _page_text(pdf: object, index: int) -> tuple[str, bool]:
    import pypdfium2.raw as raw

    page = pdf[index]  # type: ignore[index]
    try:
        textpage = page.get_textpage()
        try:
            text = str(textpage.get_text_range())
        finally:
            textpage.close()
        has_images = False
        if not text.strip():
            n = int(raw.FPDFPage_CountObjects(page.raw))
            has_images = any(int(raw.FPDFPageObj_GetType(raw.FPDFPage_GetObject(page.raw, i)))
                             == _PDFIUM_IMAGE_OBJECT for i in range(n))
        return text.replace("\r\n", "\n").replace("\r", "\n"), has_images
    finally:
        page.close()


# Limits for a DOCX, checked before its text is read. A 1,000-page report has a ~15 MB document.xml of ~1M
# elements. The streaming reader keeps only text, so these bound time more than memory.
DOCX_MAX_XML_BYTES = 24 << 20          # one XML part, uncompressed
DOCX_MAX_TOTAL_BYTES = 96 << 20        # the whole package unpacked (pictures included)
DOCX_MAX_ELEMENTS = 1_000_000
DOCX_TIME_BUDGET_S = 60.0              # reading a DOCX that passed the checks; a budget, not an expectation
_SCAN_BLOCK = 1 << 20


def check_docx(path: Path, *, deadline: float | None = None) -> None:
    """Refuse a DOCX whose unpacked size or element count is beyond the limits, before anything parses it."""
    name = path.name
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            total = sum(i.file_size for i in infos)
            if total > DOCX_MAX_TOTAL_BYTES:
                raise DocumentError(f"{name}: the DOCX unpacks to {total / 1e6:.0f} MB (the limit is "
                                    f"{DOCX_MAX_TOTAL_BYTES / 1e6:.0f} MB); save it as PDF or plain text")
            elements = 0
            for info in infos:
                if not info.filename.endswith((".xml", ".rels")):
                    continue
                if info.file_size > DOCX_MAX_XML_BYTES:
                    raise DocumentError(
                        f"{name}: {info.filename} unpacks to {info.file_size / 1e6:.0f} MB of XML (the limit is "
                        f"{DOCX_MAX_XML_BYTES / 1e6:.0f} MB); save it as PDF or plain text")
                with zf.open(info) as fh:
                    elements = _count_elements(fh, name, elements, deadline)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise DocumentError(f"{name}: the DOCX file is damaged or not a Word document ({exc})") from None


def _count_elements(fh: object, name: str, start: int, deadline: float | None) -> int:
    """Count the element tags of one XML part as it streams out of the zip (a block at a time, nothing kept):
    every ``<`` opens a tag, minus end tags, declarations and comments. Word escapes ``<`` in text, so this is
    exact for DOCX; counting with bytes.count runs at memory speed, where an expat callback per element took
    6 s for 2M elements on a loaded 2-core box. A DOCTYPE (entity definitions: Word never writes one) is refused."""
    count = start
    tail = b""
    while True:
        block = fh.read(_SCAN_BLOCK)  # type: ignore[attr-defined]
        if not block:
            return count
        seam = tail + block[:16]  # a marker cut by a block border
        if b"<!DOCTYPE" in block or b"<!DOCTYPE" in seam or b"<!ENTITY" in block:
            raise DocumentError(f"{name}: the DOCX holds a DTD, which Word never writes; refusing to read it")
        count += block.count(b"<") - block.count(b"</") - block.count(b"<?") - block.count(b"<!")
        count -= seam.count(b"</") - tail.count(b"</") - block[:16].count(b"</")  # an end tag cut by the seam
        tail = block[-16:]
        if count > DOCX_MAX_ELEMENTS:
            raise DocumentError(f"{name}: the DOCX has more than {DOCX_MAX_ELEMENTS:,} XML elements (paragraphs, "
                                "runs, cells); save it as PDF or plain text")
        _check_deadline(name, deadline)


def _check_deadline(name: str, deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise _too_slow(name)


def _too_slow(name: str) -> DocumentError:
    return DocumentError(f"{name}: reading the DOCX took longer than {DOCX_TIME_BUDGET_S:.0f} s; save it as PDF "
                         "or plain text")


def read_docx(path: Path, sha: str, progress: Callable[[int, int], None] | None = None) -> Document:
    """``progress(done, total)``: bytes of the body's XML read (``read_docx_text``)."""
    from hisho.core.documents.docx_stream import DocxDeadline, DocxFormatError, read_docx_text

    deadline = time.monotonic() + DOCX_TIME_BUDGET_S
    check_docx(path, deadline=deadline)
    try:
        body = read_docx_text(str(path), deadline=deadline, progress=progress)
    except DocxFormatError as exc:
        raise DocumentError(f"{path.name}: the DOCX file is damaged or not a Word document ({exc})") from None
    except DocxDeadline:
        raise _too_slow(path.name) from None
    doc = Document(path=path, kind="docx", sha256=sha)
    title, lines = "", list[str]()
    for kind, text in body.blocks:
        if kind == "heading":
            _flush(doc, title, lines)
            title, lines = text, [text]
        elif text.strip():
            lines.append(text)
    _flush(doc, title, lines)
    if body.pictures:
        doc.notes.append(f"{path.name}: {body.pictures} embedded pictures/charts were not read "
                         "(only text is summarized)")
    return doc


def _flush(doc: Document, title: str, body: list[str]) -> None:
    text = "\n".join(body).strip()
    if text:
        doc.sections.append(Section(text, f"§ {title}" if title else f"¶ {len(doc.sections) + 1}"))
