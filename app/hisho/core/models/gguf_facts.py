"""The one GGUF header reader: validation before a load and what the planner needs to know about a model.

``validate_gguf(path)`` checks a local file before the engine touches it (llama.cpp aborts the process on some
malformed files: a clear message first is better). ``read_facts(path)`` reads a local file;
``gguf_hub.read_hub_facts(repo, filename)`` reads the same from a file on the Hugging Face hub by fetching only
the header with HTTP range requests (never the weights). Both give a
``ModelFacts``: architecture, layer count, per-layer attention heads and KV heads, key/value lengths, the sliding
window and which layers use it, context length, vocabulary size and the exact bytes of every tensor grouped by
block (``blk.N``, ``token_embd``, ``output``, ...).

Rules: both go through ``open_header`` — missing, a folder, empty, not GGUF, an unsupported version, a header
cut short, tensor data past the end of the file or no tensors at all raise ``ModelFileError`` (a UserError)
with a one-line message. The header is walked by ``gguf_header`` (milliseconds); the ``gguf`` package's reader
only where that walk does not understand it (its failure becomes the message). Recurrent and hybrid architectures (Mamba, RWKV, LFM2, Granite-4-H, Jamba, Nemotron-H, Qwen3-Next, Falcon-H1)
carry their memory type, which layers attend and their recurrent state sizes. An architecture whose memory we
do not model (MLA, linear attention variants) still gives facts, with ``known_architecture`` False, and plans
built on them say "estimate only".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import struct
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hisho.core.errors import ModelFileError
from hisho.core.models import gguf_header
from hisho.core.models.layers import memory_layers, recurrent_state, swa_layers

log = logging.getLogger("hisho.planner")

# Plain softmax attention with one K and one V row per layer and token: the KV formula holds exactly.
KNOWN_ARCHITECTURES = frozenset({
    "llama", "mistral", "mistral3", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "phi3", "phimoe", "gemma", "gemma2",
    "gemma3", "starcoder2", "stablelm", "olmo", "olmo2", "granite", "granitemoe", "cohere2", "command-r",
    "internlm2", "gpt-oss", "smollm3", "exaone", "exaone4", "llama4", "mixtral", "falcon", "gpt2", "starcoder",
    "bloom", "baichuan", "deci", "glm4", "minicpm", "orion", "codeshell", "ernie4_5", "seed_oss", "apertus",
})

# The chat markers of the ChatML fallback (engine/model/chat.py): a model whose vocabulary has them as special tokens
# can be talked to in ChatML; one without them would see them as plain text.
CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")
_SPECIAL_TYPES = (2, 3, 4)  # llama_token_type UNKNOWN, CONTROL, USER_DEFINED: parsed as one special token


@dataclass(frozen=True)
class ModelFacts:
    """Header facts of one GGUF file. Per-layer tuples have ``n_layer`` entries."""

    source: str
    architecture: str
    name: str
    quant: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    key_length: int
    value_length: int
    n_swa: int
    swa_layers: tuple[bool, ...]
    context_length: int
    vocab_size: int
    file_size: int
    tensor_bytes: dict[str, int] = field(default_factory=dict)
    known_architecture: bool = True
    # Weights a matrix multiplication reads, as "TYPE:ne1:n_dims:bytes" -> number of such tensors: what ggml's
    # CPU backend may repack (core/planner/repack.py). A tied embedding (no output.weight) appears again as
    # "dup:...": llama.cpp loads it a second time for the output layer, which may put it in the repack buffer.
    matmul_weights: dict[str, int] = field(default_factory=dict)
    n_params: int = 0  # weights' element count (the "7B" of a 7B model)
    # "dense" (one KV cache), "swa" (a full and a sliding-window KV cache), "recurrent" (a fixed state per
    # sequence, no KV), "hybrid" (attention layers' KV + recurrent layers' state)
    memory: str = "dense"
    attention_layers: tuple[bool, ...] = ()  # layers with a KV cache (empty: every layer with KV heads)
    recurrent_layers: tuple[bool, ...] = ()  # layers with a recurrent state
    n_embd_r: int = 0   # f32 values per sequence and recurrent layer: the conv / token-shift state (r)
    n_embd_s: int = 0   # f32 values per sequence and recurrent layer: the SSM / WKV state (s)
    tied_embeddings: bool = False  # no output.weight: the token embedding is the output layer too
    # "template" (tokenizer.chat_template), "chatml" (none, but the vocabulary has ChatML's special tokens),
    # "none" (neither: a base model, talked to in plain completion)
    chat: str = "template"
    # sha256 of the header bytes (metadata and tensor table, up to the tensor data): the same for a hub file and
    # the downloaded copy, so both find the same llama.cpp dry run (planner/calibrate.py). "": not known.
    header_sha: str = ""
    rope_scaling: str = ""  # the file's RoPE scaling ("yarn x4 from 32,768 tokens"), "" for none

    def attends(self, il: int) -> bool:
        """Whether layer ``il`` has a KV cache (its KV head count may still be 0)."""
        return self.attention_layers[il] if self.attention_layers else True

    @property
    def base_model(self) -> bool:
        """No chat template and no ChatML tokens: a completion model, not a chat model."""
        return self.chat == "none"

    @property
    def weights_bytes(self) -> int:
        return sum(self.tensor_bytes.values())

    def layer_bytes(self, il: int) -> int:
        return self.tensor_bytes.get(f"blk.{il}", 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelFacts:
        data = dict(data)
        for key in ("n_head", "n_head_kv", "swa_layers", "attention_layers", "recurrent_layers"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


FACTS_VERSION = 7  # 2, 3: matmul_weights; 4: n_params; 5, 6: memory type, recurrent state, chat kind; 7: header_sha
_MEMO: dict[tuple[str, int, int], ModelFacts] = {}  # this process's parses (the disk cache is per HISHO_HOME)


GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)


def validate_gguf(path: str | Path) -> Path:
    """The resolved path if it is a loadable GGUF file (header and tensor table checked), else ModelFileError."""
    return open_header(path)[0]


def open_header(path: str | Path) -> tuple[Path, Any]:
    """``(resolved path, reader)`` of a checked local GGUF file; the reader has ``fields`` and ``tensors`` (the
    ``gguf_header`` walk or, where it fails, ``gguf.GGUFReader``). Raises ModelFileError with the reason."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {p}")
    p = p.resolve()
    size = p.stat().st_size
    if size == 0:
        raise ModelFileError(f"model file is empty (0 bytes): {p}")
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    if len(head) < 8 or head[:4] != GGUF_MAGIC:
        raise ModelFileError(f"not a GGUF model file (wrong magic bytes): {p}")
    version = struct.unpack("<I", head[4:8])[0]
    if version not in GGUF_VERSIONS:
        raise ModelFileError(f"unsupported GGUF version {version}: {p}")
    reader = _open_reader(p)
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise ModelFileError(f"GGUF file is truncated: tensor data needs {end} bytes, the file has {size}: {p}")
    if not len(reader.tensors):
        raise ModelFileError(f"GGUF file holds no tensors (metadata only?): {p}")
    return p, reader


def read_facts(path: str | Path, *, use_cache: bool = True) -> ModelFacts:
    """Facts of a local GGUF file. Raises ModelFileError as ``open_header`` does.

    Parsing a header with a large vocabulary takes seconds with the ``gguf`` reader, so the result is cached
    in paths.cache_dir()/facts, keyed by path, size and modification time."""
    p = Path(path).expanduser()
    if p.is_file():  # the cached answer for an unchanged file (checked when it was cached)
        p = p.resolve()
        st = p.stat()
        memo_key = (str(p), st.st_size, st.st_mtime_ns)
        if use_cache and memo_key in _MEMO:
            return _MEMO[memo_key]
        cache = _facts_cache(p) if use_cache else None
        if cache is not None and cache.is_file():
            try:
                return ModelFacts.from_dict(json.loads(cache.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError, KeyError):
                log.warning("facts cache %s unreadable; reading the header again", cache)
    p, reader = open_header(path)
    facts = facts_from_reader(reader, source=str(p), file_size=p.stat().st_size)
    head = _header_bytes(str(p), reader)
    if head is not None:
        facts = replace(facts, header_sha=hashlib.sha256(head).hexdigest())
    if use_cache:
        cache = _facts_cache(p)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(facts.to_dict()), encoding="utf-8")
        st = p.stat()
        _MEMO[(str(p), st.st_size, st.st_mtime_ns)] = facts
    return facts


def _facts_cache(p: Path) -> Path:
    from hisho.core import paths

    st = p.stat()
    key = f"{FACTS_VERSION}|{p}|{st.st_size}|{st.st_mtime_ns}"
    return paths.cache_dir() / "facts" / (hashlib.sha256(key.encode("utf-8")).hexdigest()[:24] + ".json")


def _open_reader(p: Path) -> Any:
    """The fast header walk (gguf_header); on anything it does not understand, the ``gguf`` package's reader,
    whose failure becomes the user's message."""
    try:
        return gguf_header.read(p)
    except (gguf_header.HeaderError, OSError, ValueError, struct.error) as exc:
        log.debug("fast header walk failed for %s (%s); using gguf.GGUFReader", p, exc)
    try:
        from gguf import GGUFReader

        return GGUFReader(str(p))
    except Exception as exc:  # the reader raises many types on a damaged or cut-short header
        raise ModelFileError(f"GGUF header is damaged or truncated ({type(exc).__name__}): {p}") from None


def facts_from_reader(reader: Any, *, source: str, file_size: int) -> ModelFacts:
    """Build ModelFacts from an open ``gguf.GGUFReader``."""
    fields = reader.fields
    arch = str(_value(fields, "general.architecture", "")) or "unknown"

    def key(suffix: str, default: Any = None) -> Any:
        return _value(fields, f"{arch}.{suffix}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_head = _per_layer(key("attention.head_count", 0), n_layer)
    n_head_kv = _per_layer(key("attention.head_count_kv", None), n_layer, fallback=n_head)
    head0 = max(n_head) if n_head else 0
    k_len = int(key("attention.key_length", n_embd // head0 if head0 else 0))
    v_len = int(key("attention.value_length", k_len))
    n_swa = int(key("attention.sliding_window", 0) or 0)
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = int(key("vocab_size", 0) or (len(tokens.data) if tokens is not None else 0))
    ff = key("feed_forward_length", 0)
    n_ff = max(ff) if isinstance(ff, list) and ff else int(ff or 0)
    layers = memory_layers(arch, n_layer, n_head_kv, _per_layer(ff, n_layer), key)
    memory, attention, recurrent = layers if layers is not None else ("dense", (), ())
    swa = swa_layers(arch, n_swa, n_layer, key("attention.sliding_window_pattern", None))
    if arch in ("lfm2", "lfm2moe") and n_swa > 0:  # a windowed LFM2: every attention layer slides
        swa = tuple(not r for r in recurrent)
    if memory == "dense" and any(swa):
        memory = "swa"
    n_embd_r, n_embd_s = recurrent_state(arch, n_embd, key) if recurrent else (0, 0)
    known = ((arch in KNOWN_ARCHITECTURES or layers is not None) and n_layer > 0
             and (head0 > 0 or memory == "recurrent") and (not recurrent or n_embd_r + n_embd_s > 0))
    if not known:
        log.info("architecture %r is not modelled exactly; plans are estimates", arch)
    names = {t.name for t in reader.tensors}
    return ModelFacts(
        source=source, architecture=arch, name=str(_value(fields, "general.name", "")),
        quant=quant_label(reader, source), n_layer=n_layer, n_embd=n_embd, n_ff=n_ff,
        n_head=n_head, n_head_kv=n_head_kv, key_length=k_len, value_length=v_len, n_swa=n_swa,
        swa_layers=swa,
        context_length=int(key("context_length", 0) or 0), vocab_size=vocab, file_size=file_size,
        tensor_bytes=_group_tensors(reader), known_architecture=known, matmul_weights=_matmul_weights(reader),
        n_params=sum(math.prod(int(d) for d in getattr(t, "shape", ())) for t in reader.tensors),
        memory=memory, attention_layers=attention, recurrent_layers=recurrent, n_embd_r=n_embd_r,
        n_embd_s=n_embd_s, tied_embeddings="token_embd.weight" in names and "output.weight" not in names,
        chat=chat_kind(fields, lambda: _header_bytes(source, reader)), rope_scaling=_rope_scaling(key),
    )


def _rope_scaling(key: Any) -> str:
    """The RoPE scaling a file declares (llama.cpp applies it: a context past the trained one stays readable)."""
    kind = str(key("rope.scaling.type", "") or "")
    if not kind or kind == "none":
        return ""
    factor = float(key("rope.scaling.factor", 0) or 0)
    orig = int(key("rope.scaling.original_context_length", 0) or 0)
    return kind + (f" x{factor:g}" if factor else "") + (f" from {orig:,} tokens" if orig else "")


def _header_bytes(source: str, reader: Any) -> bytes | None:
    """The raw header of a local file (metadata and tensor table), for what the fast walk skipped."""
    p = Path(source)
    end = int(getattr(reader, "data_offset", 0) or 0)
    if not end or not p.is_file():
        return None
    with p.open("rb") as fh:
        return fh.read(end)


def chat_kind(fields: dict[str, Any], raw: Any = None) -> str:
    """"template" when the file has a chat template; "chatml" when it has none but its vocabulary holds ChatML's
    markers as special tokens (the engine's fallback then means what it says); "none": a base model, whose
    vocabulary would read the fallback's markers as text. ``raw``: a callable giving the header's bytes, for
    when the fast header walk skipped the token list (then a marker's presence as a token string counts; the
    engine checks the token type again at load)."""
    if str(_value(fields, "tokenizer.chat_template", "") or ""):
        return "template"
    tokens = _value(fields, "tokenizer.ggml.tokens", None)
    types = _value(fields, "tokenizer.ggml.token_type", None)
    if not isinstance(tokens, list):
        data = raw() if callable(raw) else None
        if not data:
            return "none"
        listed = all(struct.pack("<Q", len(m)) + m.encode("utf-8") in data for m in CHATML_MARKERS)
        return "chatml" if listed else "none"
    found = dict.fromkeys(CHATML_MARKERS, False)
    for i, text in enumerate(tokens):
        if text in found:
            kind = int(types[i]) if isinstance(types, list) and i < len(types) else 3
            found[text] = found[text] or kind in _SPECIAL_TYPES
    return "chatml" if all(found.values()) else "none"


def _value(fields: dict[str, Any], name: str, default: Any) -> Any:
    fld = fields.get(name)
    if fld is None:
        return default
    try:
        value = fld.contents()
    except Exception:  # an odd value type: treat as absent rather than fail the whole plan
        return default
    return default if value is None else value


def _per_layer(value: Any, n_layer: int, fallback: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """A scalar or per-layer array of head counts as one entry per layer."""
    if value is None:
        return fallback if fallback is not None else (0,) * n_layer
    if isinstance(value, list):
        vals = [int(v) for v in value]
        return tuple((vals + vals[-1:] * n_layer)[:n_layer]) if vals else (0,) * n_layer
    return (int(value),) * n_layer


_BLOCK = re.compile(r"^(blk\.\d+)\.")


def _matmul_weights(reader: Any) -> dict[str, int]:
    """The weights matrix multiplications read (2-D and 3-D ``blk.*`` weights and the output), counted by
    type, rows, dimensions and size; the tied embedding again under "dup:" when there is no output.weight."""
    from gguf import GGMLQuantizationType

    out: dict[str, int] = {}
    names = set()
    for tensor in reader.tensors:
        names.add(tensor.name)
        shape = [int(d) for d in getattr(tensor, "shape", ())]
        if len(shape) < 2 or not tensor.name.endswith(".weight"):
            continue
        if not (tensor.name.startswith("blk.") or tensor.name == "output.weight" or tensor.name == "token_embd.weight"):
            continue
        try:
            tname = GGMLQuantizationType(int(tensor.tensor_type)).name
        except ValueError:
            continue
        key = f"{tname}:{shape[1]}:{len(shape)}:{int(tensor.n_bytes)}"
        if tensor.name == "token_embd.weight":
            key = "embd:" + key
        out[key] = out.get(key, 0) + 1
    for key in [k for k in out if k.startswith("embd:")]:
        value = out.pop(key)
        if "output.weight" not in names:
            out["dup:" + key[5:]] = value
    return out


def _group_tensors(reader: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for tensor in reader.tensors:
        m = _BLOCK.match(tensor.name)
        group = m.group(1) if m else tensor.name.split(".")[0]
        out[group] = out.get(group, 0) + int(tensor.n_bytes)
    return out


def quant_label(reader: Any, source: str = "") -> str:
    """"Q4_K_M"-style label: general.file_type, else the file name, else the type holding the most bytes."""
    from gguf import GGMLQuantizationType, LlamaFileType

    file_type = _value(reader.fields, "general.file_type", None)
    if file_type is not None:
        try:
            return LlamaFileType(int(file_type)).name.replace("MOSTLY_", "").replace("ALL_", "")
        except ValueError:
            pass
    m = re.search(r"(IQ\d_[A-Z]+|Q\d_K_[SML]|Q\d_K|Q\d_\d|BF16|F16|F32)", Path(source).name.upper())
    if m:
        return m.group(1)
    counts: dict[str, int] = {}
    for tensor in reader.tensors:
        name = GGMLQuantizationType(int(tensor.tensor_type)).name
        counts[name] = counts.get(name, 0) + int(tensor.n_bytes)
    return max(counts, key=lambda k: counts[k]) if counts else "unknown"


# ----- the same from the Hugging Face hub, header only --------------------------------------------------------
