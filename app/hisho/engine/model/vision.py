"""Images in a prompt: the model's projector (an ``mmproj`` GGUF) through libmtmd, and the rule that keeps image
tokens in the same token lists as text (docs/images.md).

Runs on the engine thread only, like ``Runtime`` (one owner thread per native resource).

How an image lives in a prompt: ``image_tokens`` turns a PNG into the tokens it costs in the language model, as
placeholder ids (negative, never a vocabulary token): every position of one image holds the same id, derived
from a hash of the image's bytes, so two prompts with the same image at the same place share the prefix, and
the existing reuse (``common_prefix``, ``Runtime.seqs``) works unchanged. ``Vision.chunks`` maps each id to
libmtmd's image chunk (the preprocessed image), which ``eval_span`` encodes and decodes into a sequence.

The rule for reuse (``span_floor``): cells are kept only up to the start of an image that is not wholly kept.
An image is evaluated in one piece (its tokens attend to each other in some projectors: non-causal), so a cut
inside it backs off to its start and the whole image is read again. Projectors whose image positions are not
one per token (M-RoPE: Qwen2-VL and kin) are refused at load: the token lists here count positions.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import logging
import os
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import ErrorKind

log = logging.getLogger("hisho.engine")

MAX_IMAGE_BYTES = 32 << 20  # one image's PNG as the engine takes it (hisho.core.images re-encodes within this)
KEPT_IMAGES = 64            # preprocessed images kept for prompts that come again (a conversation's history)


class VisionError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Library:
    """libmtmd, loaded at the first image (``llama_cpp.mtmd_cpp`` loads the shared library when imported): an
    engine built without it (the installer's portable build) reads text as before and says so for an image."""

    def __getattr__(self, name: str) -> Any:
        try:
            from llama_cpp import mtmd_cpp
        except (ImportError, OSError) as exc:   # FileNotFoundError: no libmtmd beside libllama
            raise VisionError(ErrorKind.BAD_REQUEST, "this build of the engine has no image support (libmtmd is "
                                                     f"missing: {exc})") from None
        return getattr(mtmd_cpp, name)


mtmd: Any = _Library()


def placeholder(digest: bytes) -> int:
    """The placeholder id of an image with this hash: negative, so never a vocabulary token."""
    return -1 - int.from_bytes(digest[:4], "little") % (2**31 - 2)


def is_image(token: int) -> bool:
    return token < 0


def next_image(tokens: list[int], start: int, end: int) -> int:
    """The first image position in ``tokens[start:end]``, or ``end``."""
    for i in range(start, end):
        if tokens[i] < 0:
            return i
    return end


class Vision:
    """A projector loaded beside a model. ``open`` makes one; ``close`` frees it."""

    def __init__(self, ctx: Any, path: str) -> None:
        self.ctx = ctx
        self.path = path
        self.non_causal = bool(mtmd.mtmd_decode_use_non_causal(ctx, None))
        self.chunks: OrderedDict[int, tuple[Any, int]] = OrderedDict()  # id -> (owned image chunk, n_tokens)
        self.texts: dict[int, tuple[list[int], list[int]]] = {}           # id -> text tokens before / after
        self.encodes = 0  # images encoded since load (a reuse that keeps an image's cells encodes nothing)
        self.tokens_per_image = 0

    @classmethod
    def open(cls, model: Any, path: str, n_threads: int, use_gpu: bool) -> Vision:
        if not os.path.isfile(path):
            raise VisionError(ErrorKind.MODEL_LOAD, f"the projector file is missing: {path}")
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = max(1, n_threads)
        params.print_timings = False
        params.warmup = False  # the first image pays for its graph instead of every load
        ctx = mtmd.mtmd_init_from_file(path.encode("utf-8"), model, params)
        if not ctx:
            raise VisionError(ErrorKind.MODEL_LOAD, f"llama.cpp could not load the projector {path} with this model "
                                                    "(another model's projector, or not a projector)")
        if not mtmd.mtmd_support_vision(ctx):
            mtmd.mtmd_free(ctx)
            raise VisionError(ErrorKind.MODEL_LOAD, f"the projector {path} reads no images (an audio projector?)")
        if mtmd.mtmd_decode_use_mrope(ctx):
            mtmd.mtmd_free(ctx)
            raise VisionError(ErrorKind.MODEL_LOAD, "this projector places images with M-RoPE positions, which "
                                                    "Hisho does not support yet")
        vision = cls(ctx, path)
        try:  # what one image costs: a square grey one (LLaVA: every image; tiling projectors: a small one)
            side = 336
            pixels = (ctypes.c_uint8 * (side * side * 3))(*([128] * (side * side * 3)))
            bitmap = mtmd.mtmd_bitmap_init(side, side, pixels)
            _none, before, n_tokens, after = vision._read(bitmap)
            vision.tokens_per_image = len(before) + n_tokens + len(after)
        except Exception:
            vision.close()
            raise
        return vision

    def close(self) -> None:
        for chunk, _n in self.chunks.values():
            mtmd.mtmd_input_chunk_free(chunk)
        self.chunks.clear()
        self.texts.clear()
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None

    def info(self) -> dict[str, Any]:
        return {"projector": self.path, "image_attention": "non-causal" if self.non_causal else "causal",
                "image_tokens": self.tokens_per_image, "image_encodes": self.encodes}

    # ----- an image's tokens ---------------------------------------------------------------------------

    def image_tokens(self, part: dict[str, Any], data_root: Path | None) -> list[int]:
        """The tokens an image part (``{"type": "image", "data": base64 PNG}`` or ``{"path": ...}`` inside the
        data folder) costs: text tokens the projector wants around it (none for LLaVA), then its placeholders."""
        png = _image_bytes(part, data_root)
        digest = hashlib.sha256(png).digest()
        pid = placeholder(digest)
        if pid not in self.chunks:
            self._tokenize(pid, png)
        self.chunks.move_to_end(pid)
        _chunk, n = self.chunks[pid]
        before, after = self.texts[pid]
        return [*before, *([pid] * n), *after]

    def _tokenize(self, pid: int, png: bytes) -> None:
        buf = (ctypes.c_uint8 * len(png)).from_buffer_copy(png)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(png), False)
        if not bitmap:
            raise VisionError(ErrorKind.BAD_REQUEST, "the image could not be decoded")
        owned, before, n_tokens, after = self._read(bitmap, keep=True)
        self.chunks[pid] = (owned, n_tokens)
        self.texts[pid] = (before, after)
        while len(self.chunks) > KEPT_IMAGES:
            old, (chunk, _n) = self.chunks.popitem(last=False)
            self.texts.pop(old, None)
            mtmd.mtmd_input_chunk_free(chunk)

    def _read(self, bitmap: Any, keep: bool = False) -> tuple[Any, list[int], int, list[int]]:
        """Tokenize one image (``bitmap``, freed here): its image chunk (a copy the caller owns, when ``keep``),
        the text tokens the projector puts before it, its token count, the text tokens after it."""
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            marker = mtmd.mtmd_default_marker()
            text = mtmd.mtmd_input_text(marker, len(marker), False, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise VisionError(ErrorKind.BAD_REQUEST, f"the projector could not read the image (code {rc})")
            before: list[int] = []
            after: list[int] = []
            image = None
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                kind = mtmd.mtmd_input_chunk_get_type(chunk)
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE and image is None:
                    image = chunk
                elif kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    toks = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    (before if image is None else after).extend(int(toks[j]) for j in range(n.value))
                else:  # a second image chunk (slices) or audio: not in this version
                    raise VisionError(ErrorKind.BAD_REQUEST, "this projector cuts images into slices, which Hisho "
                                                             "does not support yet")
            if image is None:
                raise VisionError(ErrorKind.BAD_REQUEST, "the projector made no image tokens of the image")
            n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(image))
            if int(mtmd.mtmd_input_chunk_get_n_pos(image)) != n_tokens:
                raise VisionError(ErrorKind.BAD_REQUEST, "this projector's image positions are not one per token")
            owned = mtmd.mtmd_input_chunk_copy(image) if keep else None
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)
        return owned, before, n_tokens, after

    def splice(self, parts: list[tuple[str, bool]], images: list[dict[str, Any]], marker: re.Pattern[str],
               template_tokens: Callable[[list[tuple[str, bool]]], list[int]], data_root: Path | None) -> list[int]:
        """A rendered prompt's tokens (``parts`` as ``ChatTemplate.render_parts`` gives them, tokenized by
        ``template_tokens``) with each image's tokens where ``image_parts`` put its marker in a content."""
        tokens: list[int] = []
        pending: list[tuple[str, bool]] = []
        placed = 0
        for text, markup in parts:
            pos = 0
            for found in ([] if markup else marker.finditer(text)):
                pending.append((text[pos:found.start()], markup))
                tokens += template_tokens(pending)
                pending = []
                tokens += self.image_tokens(images[int(found.group(1))], data_root)
                placed += 1
                pos = found.end()
            pending.append((text[pos:], markup))
        tokens += template_tokens(pending)
        if placed != len(images):
            raise VisionError(ErrorKind.BAD_REQUEST, f"the chat template showed {placed} of the {len(images)} "
                                                     "images (it drops some messages' contents)")
        if tokens and tokens[-1] < 0:
            raise VisionError(ErrorKind.BAD_REQUEST, "a prompt cannot end with an image")
        return tokens

    # ----- evaluation -----------------------------------------------------------------------------------

    def span_end(self, tokens: list[int], start: int) -> int:
        """Where the image that starts at ``start`` ends (its placeholders are ``tokens[start:end]``)."""
        pid = tokens[start]
        n = self._n(pid)
        return start + n

    def span_floor(self, tokens: list[int], keep: int) -> int:
        """``keep`` or, when ``tokens[keep]`` is inside an image (not at its start), that image's start."""
        if keep <= 0 or keep >= len(tokens) or tokens[keep] >= 0 or tokens[keep - 1] != tokens[keep]:
            return keep
        pid, run = tokens[keep], keep
        while run > 0 and tokens[run - 1] == pid:
            run -= 1
        if pid not in self.chunks:  # an image this engine has not read (restored cells): back off to the run
            return run
        return keep - (keep - run) % self._n(pid)

    def _n(self, pid: int) -> int:
        entry = self.chunks.get(pid)
        if entry is None:
            raise VisionError(ErrorKind.BAD_REQUEST, "an image of this prompt is not held by the engine (sent as "
                                                     "tokens only, or one of too many); send the messages again")
        return entry[1]

    def eval_span(self, lctx: Any, pid: int, n_past: int, seq: int, n_batch: int, want_logits: bool) -> int:
        """Encode the image ``pid`` and decode its embeddings into ``seq`` at ``n_past``; returns the new end."""
        chunk, n = self.chunks[pid]
        if self.non_causal and n > n_batch:  # its tokens see each other: one batch must hold them all
            raise VisionError(ErrorKind.BAD_REQUEST, f"the image takes {n} tokens and this projector reads them in "
                                                     f"one batch; the model is loaded with batches of {n_batch}")
        new_past = llama_cpp.llama_pos(0)
        rc = mtmd.mtmd_helper_eval_chunk_single(self.ctx, lctx, chunk, n_past, seq, n_batch, want_logits,
                                                ctypes.byref(new_past))
        if rc != 0:
            raise VisionError(ErrorKind.INTERNAL, f"the image could not be encoded or decoded (code {rc})")
        self.encodes += 1
        if int(new_past.value) != n_past + n:
            raise VisionError(ErrorKind.INTERNAL, "the image took another number of positions than its tokens")
        return int(new_past.value)


def _image_bytes(part: dict[str, Any], data_root: Path | None) -> bytes:
    if isinstance(part.get("data"), str):
        raw = part["data"]
        if len(raw) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            raise VisionError(ErrorKind.BAD_REQUEST, f"the image is over {MAX_IMAGE_BYTES >> 20} MiB")
        try:
            return base64.b64decode(raw, validate=True)
        except ValueError:
            raise VisionError(ErrorKind.BAD_REQUEST, "an image part's data is not base64") from None
    if isinstance(part.get("path"), str):
        path = Path(part["path"]).resolve()
        if data_root is None or not path.is_relative_to(data_root.resolve()):
            raise VisionError(ErrorKind.BAD_REQUEST, "an image path must be inside Hisho's data folder")
        try:
            if path.stat().st_size > MAX_IMAGE_BYTES:
                raise VisionError(ErrorKind.BAD_REQUEST, f"the image is over {MAX_IMAGE_BYTES >> 20} MiB")
            return path.read_bytes()
        except OSError as exc:
            raise VisionError(ErrorKind.BAD_REQUEST, f"the image file could not be read: {exc.strerror}") from None
    raise VisionError(ErrorKind.BAD_REQUEST, "an image part needs data (base64 PNG) or a path")


def image_parts(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], re.Pattern[str]]:
    """Messages whose contents are lists of parts (``{"type": "text", "text": ...}``, ``{"type": "image", ...}``)
    as the template takes them: text, each image a marker of this request (a random nonce, so no message text
    can pose as one). Returns the messages, the image parts in order and the markers' pattern."""
    nonce = secrets.token_hex(8)
    images: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            out.append(message)
            continue
        texts: list[str] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(str(part.get("text") or ""))
            elif kind == "image":
                texts.append(f"<hisho-image-{nonce}-{len(images)}>")
                images.append(part)
            else:
                raise VisionError(ErrorKind.BAD_REQUEST, f"a message part of type {kind!r}: use text or image")
        out.append({**message, "content": "".join(texts)})
    return out, images, re.compile(rf"<hisho-image-{nonce}-(\d+)>")
