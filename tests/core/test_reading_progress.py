"""A document's reading reports its progress and can be stopped there: a DOCX by the bytes of its body's XML
(block by block, up to the whole), a PDF by its pages; a ``progress`` that raises ``ReadingStopped`` stops the
reading at once, and ``Documents.attach_to_chat`` then leaves that file and the ones after it unattached."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.documents.extract import extract
from hisho.core.documents.model import ReadingStopped
from tests.core.test_docx_stream import with_body
from tests.fixtures.docs.make import make_pdf


def test_a_docx_reports_its_body_read_in_bytes_up_to_the_whole(tmp_path: Path) -> None:
    body = b"".join(b"<w:p><w:r><w:t>Paragraph %d of the report.</w:t></w:r></w:p>" % n for n in range(80_000))
    path = with_body(tmp_path / "big.docx", body)
    seen: list[tuple[int, int]] = []
    doc = extract(path, progress=lambda done, total: seen.append((done, total)))
    assert doc.sections and len(seen) >= 3                  # several blocks: a bar that moves
    totals = {t for _, t in seen}
    assert len(totals) == 1 and totals.pop() > len(body)    # one total: the body's XML, whole
    dones = [d for d, _ in seen]
    assert dones == sorted(dones) and dones[-1] == seen[-1][1]


@pytest.mark.parametrize("kind", ["pdf", "docx"])
def test_a_progress_that_raises_stops_the_reading_there(tmp_path: Path, kind: str) -> None:
    if kind == "pdf":
        path = make_pdf(tmp_path / "long.pdf", [f"Page {i}. " * 20 for i in range(40)])
    else:
        body = b"".join(b"<w:p><w:r><w:t>Paragraph %d.</w:t></w:r></w:p>" % n for n in range(80_000))
        path = with_body(tmp_path / "big.docx", body)
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 2:
            raise ReadingStopped(f"{path.name}: reading stopped")

    with pytest.raises(ReadingStopped):
        extract(path, progress=progress)
    assert len(calls) == 2
