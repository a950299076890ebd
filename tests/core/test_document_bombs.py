"""Crafted DOCX files are refused before anything parses them, in bounded memory.

The bombs are real zips made here: one whose document.xml unpacks to 1.5 GB, one of 200 MB of short
paragraphs, and one under the size limit with millions of elements. Each is read in a child process so its
peak memory can be measured (``ru_maxrss``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hisho.core.documents import binary
from hisho.core.documents.extract import extract
from hisho.core.documents.model import DocumentError
from tests.fixtures.docs.make import make_docx

PEAK_LIMIT_MB = 300
NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def bomb(path: Path, body_piece: bytes, total_bytes: int) -> Path:
    """A valid DOCX package whose word/document.xml repeats ``body_piece`` up to ``total_bytes``."""
    good = make_docx(path.with_suffix(".src.docx"), [("Title", ["text"])])
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info, src.read(info))
        with out.open("word/document.xml", "w", force_zip64=True) as fh:
            fh.write(f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {NS}><w:body>'.encode())
            block = body_piece * max(1, (4 << 20) // len(body_piece))
            written = 0
            while written < total_bytes:
                fh.write(block)
                written += len(block)
            fh.write(b"</w:body></w:document>")
    return path


def read_in_child(path: Path) -> dict[str, object]:
    code = (
        "import json, resource, sys, time\n"
        "from hisho.core.documents.extract import extract\n"
        "from hisho.core.documents.model import DocumentError\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "t = time.perf_counter()\n"
        "try:\n"
        f"    extract({str(path)!r}); err = ''\n"
        "except DocumentError as exc:\n"
        "    err = str(exc)\n"
        "print(json.dumps({'error': err, 'seconds': time.perf_counter() - t,\n"
        "                  'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,\n"
        "                  'baseline_mb': before / 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{path.name}: {path.stat().st_size} bytes -> {json.dumps(result)}")  # figures for the issue (-s)
    return result


@pytest.mark.parametrize("kind", ["expands_1.5GB", "paragraphs_200MB", "elements_under_size_limit"])
def test_docx_bombs_are_refused_in_bounded_memory(tmp_path: Path, kind: str) -> None:
    if kind == "expands_1.5GB":
        path = bomb(tmp_path / "big.docx", b"<w:p><w:r><w:t>" + b"A" * 4000 + b"</w:t></w:r></w:p>", 1500 << 20)
        expected = "unpacks to"
    elif kind == "paragraphs_200MB":
        path = bomb(tmp_path / "paras.docx", b"<w:p><w:r><w:t>a</w:t></w:r></w:p>", 200 << 20)
        expected = "unpacks to"
    else:
        path = bomb(tmp_path / "many.docx", b"<w:p/>", binary.DOCX_MAX_XML_BYTES // 2)
        expected = "XML elements"
    assert path.stat().st_size < 8 << 20
    out = read_in_child(path)
    assert expected in str(out["error"]) and path.name in str(out["error"])
    assert float(out["peak_mb"]) <= PEAK_LIMIT_MB  # type: ignore[arg-type]


def test_a_dtd_is_refused(tmp_path: Path) -> None:
    path = bomb(tmp_path / "dtd.docx", b"<w:p/>", 10)
    with zipfile.ZipFile(path) as zf:
        parts = {i.filename: zf.read(i) for i in zf.infolist()}
    parts["word/document.xml"] = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]>'
                                  + parts["word/document.xml"].split(b"?>", 1)[1])
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    with pytest.raises(DocumentError, match="DTD"):
        extract(path)


def test_the_time_budget_refuses_with_a_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_docx(tmp_path / "ok.docx", [("Title", ["some text"] * 50)])
    assert extract(path).sections  # within the budget: read as before
    monkeypatch.setattr(binary, "DOCX_TIME_BUDGET_S", -1.0)
    with pytest.raises(DocumentError, match="took longer than"):
        extract(path)
