"""Extraction: every format keeps its references; every bad input gets the one line the user sees."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from hisho.core.documents.extract import extract, extract_many
from hisho.core.documents.model import DocumentError, PageSpan, page_range
from hisho.core.errors import UserError
from tests.fixtures.docs.make import make_docx, make_encrypted_pdf, make_image_pdf, make_pdf


def test_pdf_pages_are_references(tmp_path: Path) -> None:
    doc = extract(make_pdf(tmp_path / "a.pdf", ["Alpha on one", "Beta on two\nsecond line", "Gamma on three"]))
    assert doc.kind == "pdf" and doc.pages == 3
    assert [(s.ref, s.page) for s in doc.sections] == [("p. 1", 1), ("p. 2", 2), ("p. 3", 3)]
    assert "Beta on two\nsecond line" == doc.sections[1].text
    assert doc.notes == []


def test_scanned_pages_are_named_in_notes(tmp_path: Path) -> None:
    doc = extract(make_pdf(tmp_path / "mixed.pdf", ["text", "", "", "more"], image_pages=(2, 3)))
    assert [s.page for s in doc.sections] == [1, 4]
    assert doc.notes == ["mixed.pdf: pp. 2–3 have no text layer (images only, e.g. scanned); they are not in "
                         "the summary (run OCR to include them)"]


def test_image_only_pdf_suggests_ocr(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as err:
        extract(make_image_pdf(tmp_path / "scan.pdf", 3))
    assert str(err.value) == ("scan.pdf: the PDF has no text layer (3 pages of images, e.g. a scan); run OCR on it "
                              "first (for example ocrmypdf) and summarize the result")


def test_encrypted_pdf_asks_for_password(tmp_path: Path) -> None:
    path = make_encrypted_pdf(tmp_path / "locked.pdf", "s3cret")
    with pytest.raises(DocumentError, match=r"^locked.pdf: the PDF is encrypted; give its password"):
        extract(path)
    with pytest.raises(DocumentError, match="wrong password"):
        extract(path, password="nope")
    doc = extract(path, password="s3cret")
    assert doc.sections[0].text == "Secret quarterly figures"


def test_corrupt_pdf_and_docx(tmp_path: Path) -> None:
    good = make_pdf(tmp_path / "good.pdf", ["hello"]).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(good[: len(good) // 3])
    (tmp_path / "junk.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 4)
    for name in ("cut.pdf", "junk.pdf"):
        with pytest.raises(DocumentError, match=rf"^{name}: the PDF is damaged and cannot be read"):
            extract(tmp_path / name)
    (tmp_path / "bad.docx").write_bytes(b"PK\x03\x04 this is not really a zip")
    docx_bytes = make_docx(tmp_path / "ok.docx", [("H", ["p"])]).read_bytes()
    (tmp_path / "trunc.docx").write_bytes(docx_bytes[:2000])
    for name in ("bad.docx", "trunc.docx"):
        with pytest.raises(DocumentError, match=rf"^{name}: the DOCX file is damaged or not a Word document"):
            extract(tmp_path / name)


def test_empty_missing_unsupported(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DocumentError, match=r"^empty.txt: the file is empty \(0 bytes\)$"):
        extract(tmp_path / "empty.txt")
    (tmp_path / "sheet.xlsx").write_bytes(b"x")
    with pytest.raises(DocumentError, match=r"^sheet.xlsx: unsupported file type '.xlsx' \(Hisho reads PDF"):
        extract(tmp_path / "sheet.xlsx")
    with pytest.raises(DocumentError, match="no such file"):
        extract(tmp_path / "gone.pdf")
    (tmp_path / "blank.md").write_text("\n\n   \n")
    with pytest.raises(DocumentError, match="holds no text"):
        extract(tmp_path / "blank.md")


def test_binary_renamed_txt(tmp_path: Path) -> None:
    png = bytes.fromhex("89504E470D0A1A0A0000000D49484452") + bytes(range(256)) * 8
    (tmp_path / "photo.txt").write_bytes(png)
    with pytest.raises(DocumentError, match=r"^photo.txt: this looks like a binary file, not text"):
        extract(tmp_path / "photo.txt")
    (tmp_path / "prog.txt").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64 + b"some strings" + b"\x00\x01" * 50)
    with pytest.raises(DocumentError, match="binary file"):
        extract(tmp_path / "prog.txt")


def test_files_without_a_known_extension_are_read_by_content(tmp_path: Path) -> None:
    licence = "GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n\nEveryone is permitted to copy it.\n" * 40
    (tmp_path / "GPL-3").write_text(licence, encoding="utf-8")
    doc = extract(tmp_path / "GPL-3")
    assert doc.kind == "text" and doc.text.strip() == licence.strip()
    (tmp_path / "server.log").write_bytes("Straße geöffnet, café\n".encode("cp1252") * 50)
    assert "Straße" in extract(tmp_path / "server.log").text
    (tmp_path / "page").write_text("<!DOCTYPE html><html><body><h1>Title</h1><p>Body text.</p></body></html>")
    assert extract(tmp_path / "page").kind == "html"
    make_pdf(tmp_path / "report.pdf", ["Page one text."]).rename(tmp_path / "report")
    assert extract(tmp_path / "report").kind == "pdf"
    (tmp_path / "a.out").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64 + b"strings")
    with pytest.raises(DocumentError, match=r"^a.out: this looks like a binary file, not text"):
        extract(tmp_path / "a.out")
    (tmp_path / "bundle").write_bytes(b"PK\x03\x04" + b"\x14\x00" * 40)
    with pytest.raises(DocumentError, match="archive"):
        extract(tmp_path / "bundle")


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1", "utf-16", "shift_jis"])
def test_non_utf8_text_is_decoded(tmp_path: Path, encoding: str) -> None:
    text = ("東京の会議では予算が承認されました。図書館と道路の修理に使われます。\n" * 20 if encoding == "shift_jis"
            else "Grüße aus Köln. Die Straße wird repariert, das Café bleibt geöffnet. Æble og øl.\n" * 20)
    (tmp_path / "note.txt").write_bytes(text.encode(encoding))
    doc = extract(tmp_path / "note.txt")
    assert doc.text.strip() == text.strip()
    assert doc.encoding and doc.encoding.replace("_", "").lower() != "utf8"


def test_markdown_rst_html_headings(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Intro text.\n\n# Methods\nWe measured.\n\n## Results\nIt worked.\n")
    assert [(s.ref, s.text.splitlines()[-1]) for s in extract(tmp_path / "a.md").sections] == [
        ("line 1", "Intro text."), ("§ Methods", "We measured."), ("§ Results", "It worked.")]
    (tmp_path / "b.rst").write_text("Title\n=====\n\nBody one.\n\nPart two\n--------\nBody two.\n")
    assert [s.ref for s in extract(tmp_path / "b.rst").sections] == ["§ Title", "§ Part two"]
    (tmp_path / "c.html").write_text("<html><head><style>p{}</style><script>var x;</script></head><body>"
                                     "<h1>Report</h1><p>First &amp; best.</p><img src=x.png><h2>End</h2>"
                                     "<p>Bye.</p></body></html>")
    doc = extract(tmp_path / "c.html")
    assert [(s.ref, s.text) for s in doc.sections] == [("§ Report", "Report\n\nFirst & best."),
                                                        ("§ End", "End\n\nBye.")]
    assert doc.notes == ["c.html: 1 embedded images/objects were not read"]


def test_markdown_hash_lines_in_code_are_not_headings(tmp_path: Path) -> None:
    text = ("# Setup\nRun this:\n\n```bash\n# install the tools\npip install hisho\n```\n\n"
            "    # an indented code line\n\nUsage\n=====\nType a question.\n")
    (tmp_path / "d.md").write_text(text)
    sections = extract(tmp_path / "d.md").sections
    assert [s.ref for s in sections] == ["§ Setup", "§ Usage"]
    assert "# install the tools" in sections[0].text and "# an indented code line" in sections[0].text


def test_docx_headings_tables_pictures(tmp_path: Path) -> None:
    import docx

    path = make_docx(tmp_path / "r.docx", [("Summary", ["Sales rose."]), ("Outlook", ["Calm."])], picture=True)
    d = docx.Document(str(path))
    table = d.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Q1", "42"
    d.save(str(path))
    doc = extract(path)
    assert [s.ref for s in doc.sections] == ["§ Summary", "§ Outlook"]
    assert "Q1 | 42" in doc.sections[1].text
    assert doc.notes == ["r.docx: 1 embedded pictures/charts were not read (only text is summarized)"]


def test_several_files_one_bad(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("fine")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / "c.md").write_text("# ok\nalso fine")
    out = extract_many([tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.md"])
    assert [d.name for d in out.documents] == ["a.txt", "c.md"]
    assert [str(e) for e in out.errors] == ["b.txt: the file is empty (0 bytes)"]


def test_500_page_pdf_streams_pages(tmp_path: Path) -> None:
    pages = [f"Page {i} of the long report.\n" + f"Budget line item number {i}. " * 30 for i in range(1, 501)]
    path = make_pdf(tmp_path / "long.pdf", pages)
    proc = psutil.Process()
    base = proc.memory_info().rss
    seen: list[tuple[int, int]] = []
    peak = [base]

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if done % 25 == 0:
            peak[0] = max(peak[0], proc.memory_info().rss)

    doc = extract(path, progress=progress)
    assert len(doc.sections) == 500 and doc.sections[-1].ref == "p. 500"
    assert seen == [(i, 500) for i in range(1, 501)]  # progress is per page and exact
    assert peak[0] - base < 64 * 2**20, f"RSS grew {(peak[0] - base) / 2**20:.0f} MiB while reading"


def test_page_range() -> None:
    assert page_range([3]) == "p. 3"
    assert page_range([5, 3, 4, 9]) == "pp. 3–5, 9"
    assert page_range([]) == ""


def test_page_cut_reads_only_the_asked_pages_and_says_what_was_cut(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "long.pdf", [f"Page {i} text." for i in range(1, 31)])
    seen: list[tuple[int, int]] = []
    doc = extract(path, pages=PageSpan.parse("1-20"), progress=lambda d, t: seen.append((d, t)))
    assert [s.page for s in doc.sections] == list(range(1, 21)) and doc.pages == 30
    assert seen[-1] == (20, 20) and len(seen) == 20  # progress counts the pages asked for
    assert doc.cut == "pp. 21–30"
    assert doc.notes == ["long.pdf: pp. 21–30 not read, as asked (--pages 1-20)"]
    middle = extract(path, pages=PageSpan.parse("5-6"))
    assert [s.page for s in middle.sections] == [5, 6] and middle.cut == "pp. 1–4, 7–30"
    assert extract(path, pages=PageSpan.parse("1-")).cut == ""  # the whole file: nothing was cut
    assert extract(path).cut == "" and extract(path).notes == []
    with pytest.raises(DocumentError, match=r"^long.pdf: --pages 40-50 is past the end \(the PDF has 30 pages\)$"):
        extract(path, pages=PageSpan.parse("40-50"))
    (tmp_path / "n.md").write_text("# A\nno pages here\n")
    assert extract(tmp_path / "n.md", pages=PageSpan.parse("2")).cut == ""  # other formats are read whole


@pytest.mark.parametrize("spec,expected", [("1-20", (1, 20)), ("5", (5, 5)), ("30-", (30, None)),
                                           (" 2–4 ", (2, 4))])
def test_page_span_parse(spec: str, expected: tuple[int, int | None]) -> None:
    span = PageSpan.parse(spec)
    assert (span.first, span.last) == expected


@pytest.mark.parametrize("spec", ["", "a-b", "0-3", "5-2", "-4", "1-2-3"])
def test_page_span_refuses_with_the_accepted_forms(spec: str) -> None:
    with pytest.raises(UserError, match=r"^--pages "):
        PageSpan.parse(spec)
