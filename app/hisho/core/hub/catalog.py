"""What the hub offers: GGUF repositories by search, a repository's GGUF files grouped by quant, its model card.

Everything goes through huggingface_hub's ``HfApi`` (``list_models``, ``model_info`` with file metadata). Calls
block: the window runs them on a worker lane, the CLI directly.

Paging: ``list_models(limit=N)`` asks the hub for N results and follows its ``Link: rel="next"`` pages until it
has them; page k of size s is the slice [k·s, (k+1)·s) of ``limit=(k+1)·s`` (docs/hub.md: the hub's cursor is
opaque, so a later page cannot be asked for directly).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from hisho.core.hub.errors import NotFound, endpoint, hub_call
from hisho.core.hub.token import get_token

SORTS = {"downloads": "downloads", "likes": "likes", "updated": "last_modified"}
PAGE_SIZE = 20
SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
SPLIT_TAIL = re.compile(r"-\d{5}-of-\d{5}$")
QUANT = re.compile(r"(IQ\d_[A-Z]+|I?Q\d_K_[SMLX]L?|Q\d_K|Q\d_\d|TQ\d_\d|MXFP4|BF16|F16|F32)", re.IGNORECASE)


@dataclass
class RepoSummary:
    repo: str
    downloads: int
    likes: int
    updated: str
    gated: bool
    tags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class QuantFile:
    """One downloadable model: a single GGUF, or the parts of a split one (``-00001-of-0000N``)."""

    repo: str
    name: str                 # the first part's path in the repo (what llama.cpp opens)
    quant: str
    size: int                 # summed over parts
    parts: list[str]
    sha256: list[str]         # per part, "" when the hub gave none
    part_sizes: list[int] = field(default_factory=list)
    revision: str = ""
    # The repository's vision projector for this model (``match_projector``): its path, size and sha256; "" for
    # a text-only repository. Downloaded with the model and saved beside it as ``<stem>.mmproj.gguf``.
    mmproj: str = ""
    mmproj_size: int = 0
    mmproj_sha256: str = ""

    @property
    def spec(self) -> str:
        return f"{self.repo}:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec
        return d


def _api() -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=get_token())


def search(text: str, *, sort: str = "downloads", page: int = 0, page_size: int = PAGE_SIZE) -> list[RepoSummary]:
    """GGUF repositories whose id contains ``text``, best first by ``sort`` (downloads, likes, updated)."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    want = (page + 1) * page_size
    with hub_call(f"search {text!r}"):
        it = _api().list_models(search=text or None, filter="gguf", sort=SORTS[sort], limit=want)
        rows = list(islice(it, page * page_size, want))
    return [RepoSummary(repo=m.id, downloads=int(m.downloads or 0), likes=int(m.likes or 0),
                        updated=m.last_modified.isoformat() if m.last_modified else "",
                        gated=bool(m.gated), tags=list(m.tags or [])) for m in rows]


def quant_of(name: str) -> str:
    m = QUANT.search(name.rsplit("/", 1)[-1])
    return m.group(1).upper() if m else "unknown"


def is_mmproj(path: str) -> bool:
    low = path.lower()
    return low.endswith(".gguf") and "mmproj" in low.rsplit("/", 1)[-1]


def match_projector(model: str, projectors: list[tuple[str, int, str]]) -> tuple[str, int, str] | None:
    """The projector of ``projectors`` ((path, size, sha256)) that goes with model file ``model``: one whose name
    carries the model's name (its quant left out) first, then F16, then BF16, then F32, then the smallest. The
    header check (projector type, width) comes at download (``hisho.core.models.projector_facts.mismatch``)."""
    if not projectors:
        return None
    base = QUANT.sub("", model.rsplit("/", 1)[-1].lower().removesuffix(".gguf")).strip("-_. ")
    base = SPLIT_TAIL.sub("", base)

    def rank(p: tuple[str, int, str]) -> tuple[int, int, int, int, str]:
        name = p[0].rsplit("/", 1)[-1].lower()
        named = 0 if base and base in name else 1
        q = quant_of(name)
        prec = {"F16": 0, "BF16": 1, "F32": 2}.get(q, 3)
        same_folder = 0 if p[0].rpartition("/")[0] == model.rpartition("/")[0] else 1
        return (same_folder, named, prec, p[1], name)

    return min(projectors, key=rank)


def group_files(repo: str, siblings: list[tuple[str, int, str]], revision: str = "") -> list[QuantFile]:
    """(path, size, sha256) of a repo's files -> GGUF models, split parts joined, smallest first; each with its
    matching projector (``mmproj``) where the repository has any (projector files are never models)."""
    groups: dict[str, list[tuple[int, str, int, str]]] = {}
    projectors = [s for s in siblings if is_mmproj(s[0])]
    for path, size, sha in siblings:
        low = path.lower()
        if not low.endswith(".gguf") or is_mmproj(path):
            continue
        m = SPLIT.match(path)
        key, part = (m.group("base"), int(m.group("part"))) if m else (path, 1)
        groups.setdefault(key, []).append((part, path, size, sha))
    out = []
    for key, parts in groups.items():
        parts.sort()
        m = SPLIT.match(parts[0][1])
        if m and len(parts) != int(m.group("count")):
            continue  # an incomplete upload: llama.cpp could not load it
        out.append(QuantFile(repo=repo, name=parts[0][1], quant=quant_of(key), size=sum(p[2] for p in parts),
                             parts=[p[1] for p in parts], sha256=[p[3] for p in parts],
                             part_sizes=[p[2] for p in parts], revision=revision))
        proj = match_projector(parts[0][1], projectors)
        if proj is not None:
            out[-1].mmproj, out[-1].mmproj_size, out[-1].mmproj_sha256 = proj
    return sorted(out, key=lambda q: (q.size, q.name))


def repo_files(repo: str) -> list[QuantFile]:
    """The GGUF models in ``repo`` at its current revision, with sizes and sha256 from the hub."""
    if repo.count("/") != 1:
        raise NotFound(f"expected a repository as OWNER/NAME, got {repo!r}")
    with hub_call(repo):
        info = _api().model_info(repo, files_metadata=True)
    sibs = []
    for s in info.siblings or []:
        sha = s.lfs.sha256 if s.lfs is not None else ""
        sibs.append((s.rfilename, int(s.size or (s.lfs.size if s.lfs else 0) or 0), sha))
    return group_files(repo, sibs, revision=str(info.sha or ""))


def model_card(repo: str, revision: str | None = None) -> str:
    """The repository's README.md as Markdown text (front matter removed); "" when there is none."""
    from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazily exported

    url = hf_hub_url(repo, "README.md", revision=revision, endpoint=endpoint())
    with hub_call(f"{repo} model card"):
        r = get_session().get(url, headers=build_hf_headers(token=get_token()), follow_redirects=True)
        if r.status_code == 404:
            return ""
        hf_raise_for_status(r)
        text = r.text
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4:].lstrip("\n")
    return text
