"""DOCX text is read off the streamed XML: no per-paragraph object model, so a file of 120,000 short paragraphs
is read whole in one pass and bounded memory, and what is read matches Word's model of the text."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from hisho.core.documents.extract import extract
from tests.fixtures.docs.make import make_docx

NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
PEAK_LIMIT_MB = 300


def with_body(path: Path, body: bytes) -> Path:
    """A real DOCX package (made by python-docx) whose body is replaced by ``body``."""
    src = make_docx(path.with_suffix(".src.docx"), [("Title", ["text"])])
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in zin.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info, zin.read(info))
        out.writestr("word/document.xml", f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                     f"<w:document {NS}><w:body>".encode() + body + b"</w:body></w:document>")
    return path


def test_120000_short_paragraphs_are_read_whole_without_an_object_model(tmp_path: Path) -> None:
    body = b"".join(b"<w:p><w:r><w:t>Item %d.</w:t></w:r></w:p>" % (n % 50) for n in range(120_000))
    path = with_body(tmp_path / "many.docx", body)
    assert path.stat().st_size < 128 << 10  # a small file that holds a great many paragraphs
    code = (
        "import json, resource, sys, time\n"
        "from hisho.core.documents.extract import extract\n"
        "t = time.perf_counter()\n"
        f"doc = extract({str(path)!r})\n"
        "print(json.dumps({'lines': sum(s.text.count(chr(10)) + 1 for s in doc.sections),\n"
        "                  'last': doc.sections[-1].text.rsplit(chr(10), 1)[-1],\n"
        "                  'object_model': 'docx' in sys.modules, 'seconds': time.perf_counter() - t,\n"
        "                  'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{path.name}: {path.stat().st_size} bytes -> {json.dumps(out)}")  # figures for the notes (-s)
    assert out["lines"] == 120_000 and out["last"] == "Item 49."
    assert out["object_model"] is False  # python-docx is never imported to read a file
    assert out["peak_mb"] <= PEAK_LIMIT_MB


def test_runs_breaks_tables_text_boxes_and_deleted_text(tmp_path: Path) -> None:
    body = (b'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Results</w:t></w:r></w:p>'
            b'<w:p><w:r><w:t xml:space="preserve">Sales </w:t></w:r><w:r><w:t>rose</w:t><w:tab/>'
            b"<w:t>a&amp;b</w:t><w:br/><w:t>next line</w:t></w:r>"
            b"<w:del><w:r><w:delText>removed</w:delText></w:r></w:del>"
            b"<w:r><w:drawing><w:txbxContent><w:p><w:r><w:t>boxed</w:t></w:r></w:p></w:txbxContent>"
            b"</w:drawing></w:r></w:p>"
            b"<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Q1</w:t></w:r></w:p></w:tc>"
            b"<w:tc><w:p><w:r><w:t>42</w:t></w:r></w:p></w:tc></w:tr>"
            b"<w:tr><w:tc><w:p><w:r><w:t>Q2</w:t></w:r></w:p></w:tc>"
            b"<w:tc><w:p><w:r><w:t>40</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
            b'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Outlook</w:t></w:r></w:p>'
            b"<w:p><w:r><w:t>Calm.</w:t></w:r></w:p><w:sectPr/>")
    doc = extract(with_body(tmp_path / "r.docx", body))
    assert [s.ref for s in doc.sections] == ["§ Results", "§ Outlook"]
    assert doc.sections[0].text == "Results\nSales rose\ta&b\nnext line\nQ1 | 42\nQ2 | 40"
    assert doc.sections[1].text == "Outlook\nCalm."
    assert doc.notes == []


def test_same_text_as_python_docx_on_a_document_it_wrote(tmp_path: Path) -> None:
    import docx

    path = make_docx(tmp_path / "w.docx", [("Summary", ["Sales rose.", "Costs fell."]), ("Outlook", ["Calm."])],
                     picture=True)
    d = docx.Document(str(path))
    d.add_heading("Figures", level=2)
    table = d.add_table(rows=2, cols=2)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"r{r}c{c}"
    d.save(str(path))
    doc = extract(path)
    assert [s.ref for s in doc.sections] == ["§ Summary", "§ Outlook", "§ Figures"]
    assert doc.sections[2].text == "Figures\nr0c0 | r0c1\nr1c0 | r1c1"
    assert doc.notes == ["w.docx: 1 embedded pictures/charts were not read (only text is summarized)"]
