"""Which weights llama.cpp's CPU backend repacks, and what that costs in memory (issue 17, docs/planner.md).

ggml's CPU backend has an "extra" buffer type, ``CPU_REPACK`` (ggml-cpu/repack.cpp), used when a model is loaded
with ``use_extra_bufts`` (llama.cpp's default): a weight that a matrix multiplication reads, of a type the CPU
has an interleaved kernel for, is copied at load time into an interleaved layout in that buffer. The copy is
allocated memory, not the file's pages. With mmap on, llama.cpp reads the file's pages to repack them, and those
pages stay mapped in the process beside the copy: the weights are held twice (1B Q4_0 shape: VmHWM 1409 MiB with
mmap, 894 MiB without). So the engine loads a model that has repacked weights WITHOUT mmap (``use_mmap`` below),
and the planner prices what that load holds.

The rule, as ggml_repack_get_optimal_repack_type in the llama.cpp that llama-cpp-python 0.3.36 vendors has it,
for a weight of type T whose second dimension (ne[1], the number of rows) divides by the interleave:
- x86 with AVX2: Q4_0, Q4_K, IQ4_NL, MXFP4 (ne[1] % 8); with AVX-512 also Q2_K (% 8). Q5_K, Q6_K, Q8_0, IQ4_XS
  and the legacy Q4_1/Q5_0/Q5_1 are not repacked on x86.
- ARM with NEON and i8mm or dotprod: Q4_0 (% 4), Q4_K, Q5_K, Q6_K (% 8), IQ4_NL, MXFP4, Q8_0 (% 4); with SVE and
  i8mm at 256-bit vectors Q4_0 (% 8).
Only weights used by a matrix multiplication (``blk.*`` 2-D/3-D weights and the output) qualify; the token
embedding is read by GET_ROWS and stays where it is, but a TIED embedding is loaded a second time as the output
layer's weight, which is a matrix multiplication: if its type is repacked, that second copy is extra memory.
The dry run (``no_alloc``) prints the ``CPU_REPACK model buffer size`` line, so a calibrated plan uses
llama.cpp's own figure; this rule prices hub files and uncalibrated plans, from this machine's CPU features.
"""

from __future__ import annotations

from collections.abc import Iterable

from hisho.core.models.gguf_facts import ModelFacts

# (needed CPU features, types, row multiple). The first rule whose features are all present and whose row
# multiple divides ne[1] decides, as in ggml's if-chains (a failed row check falls through to later rules).
RULES: tuple[tuple[frozenset[str], frozenset[str], int], ...] = (
    (frozenset({"avx2"}), frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}), 8),
    (frozenset({"avx512"}), frozenset({"Q2_K"}), 8),
    (frozenset({"sve", "matmul_int8", "sve256"}), frozenset({"Q4_0"}), 8),
    (frozenset({"neon", "matmul_int8"}), frozenset({"Q4_0", "Q8_0"}), 4),
    (frozenset({"neon", "matmul_int8"}), frozenset({"Q4_K", "Q5_K", "Q6_K"}), 8),
    (frozenset({"neon", "dotprod"}), frozenset({"Q4_0", "Q8_0", "IQ4_NL", "MXFP4"}), 4),
    (frozenset({"neon", "dotprod"}), frozenset({"Q4_K", "Q5_K", "Q6_K"}), 8),
)


def repacked_type(type_name: str, ne1: int, features: Iterable[str]) -> bool:
    """Whether a matmul weight of ``type_name`` with ``ne1`` rows is repacked on a CPU with ``features``."""
    have = set(features)
    return any(need <= have and type_name in types and ne1 % mult == 0 for need, types, mult in RULES)


def repacked_bytes(facts: ModelFacts, features: Iterable[str]) -> tuple[int, int]:
    """(bytes of file weights that go to CPU_REPACK, extra bytes of a repacked second copy of a tied
    embedding)."""
    moved, dup, _largest = repack_plan(facts, features)
    return moved, dup


def repack_plan(facts: ModelFacts, features: Iterable[str]) -> tuple[int, int, int]:
    """(moved, dup, largest): as ``repacked_bytes``, plus the largest single repacked tensor. Without mmap,
    llama.cpp reads each repacked tensor through a temporary buffer of its size (llama-model-loader.cpp
    load_all_data, ``read_buf``); glibc keeps the last such block in the heap (its mmap threshold rises to
    the freed size, up to 32 MiB), so about one largest tensor stays resident after the load (measured: 9 MiB
    on the 1B Q4_0 shape, its ffn tensors' size)."""
    feats = frozenset(features)
    moved = dup = largest = 0
    for key, count in facts.matmul_weights.items():
        parts = key.split(":")
        is_dup = parts[0] == "dup"
        if is_dup:
            parts = parts[1:]
        type_name, ne1, nbytes = parts[0], int(parts[1]), int(parts[3])
        if not repacked_type(type_name, ne1, feats):
            continue
        largest = max(largest, nbytes)
        if is_dup:
            dup += nbytes * count
        else:
            moved += nbytes * count
    return moved, dup, largest


def use_mmap(repacked: int) -> bool:
    """The engine's policy: map the file unless some weights get repacked (then every byte is read once into
    allocated memory and the file's pages are not kept). Mapping is faster to open and shares pages with the
    page cache; holding 500 MB-4 GB of weights twice is not worth that."""
    return repacked == 0


def features_from_system_info(text: str) -> frozenset[str]:
    """CPU features from llama.cpp's ``llama_print_system_info`` text (``CPU : SSE3 = 1 | AVX2 = 1 | ...``)."""
    names = {"AVX2": "avx2", "AVX512": "avx512", "NEON": "neon", "MATMUL_INT8": "matmul_int8",
             "DOTPROD": "dotprod", "SVE": "sve", "AVX512_VNNI": "avx512_vnni", "AVX_VNNI": "avx_vnni"}
    out = set()
    for part in text.replace("\n", "|").split("|"):
        key, _, value = part.partition("=")
        key = key.strip().split(":")[-1].strip()
        if key in names and value.strip() not in ("", "0"):
            out.add(names[key])
        if key == "SVE_CNT" and value.strip() == "32":
            out.add("sve256")
    return frozenset(out)
