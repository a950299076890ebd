"""What a saved KV state depends on: the facts hashed into its fingerprint (docs/kv-format.md "Fingerprint").

Engine thread only (reads the runtime's model). ``state_facts`` is computed once per loaded runtime.
"""

from __future__ import annotations

import hashlib
from typing import Any

import llama_cpp

from hisho.core.kv import format as kvf
from hisho.core.models import identity as model_identity
from hisho.engine.lib.llama_setup import prompt_offload
from hisho.engine.model.runtime import Runtime


def gguf_identity(path: str) -> dict[str, Any]:
    """Identity of a GGUF file: a hash of every byte, cached per file version (hisho.core.models.identity)."""
    return model_identity.identity(path)


def state_facts(rt: Runtime) -> dict[str, Any]:
    """Everything that decides whether a saved state may be loaded into this context. n_ctx is left out: a
    state loads into any context with room for its cells."""
    p = rt.params
    return {
        "kv_format": kvf.FORMAT_VERSION,
        "gguf": gguf_identity(p.model_path),
        "llama_cpp_python": llama_cpp.__version__,
        "system": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
        "type_k": p.type_k, "type_v": p.type_v, "flash_attn": p.flash_attn, "swa_full": p.swa_full,
        # The ubatch a prompt was read in can change the cells' last bits (the plan picks it per context).
        "n_ubatch": p.n_ubatch,
        "kv_unified": p.kv_unified, "n_gpu_layers": p.n_gpu_layers,
        # Where a prompt's products ran (the GPU or the CPU) changes the cells' last bits; only a load with
        # layers offloaded has a choice (llama_setup.prompt_offload), so a CPU load's fingerprint is unchanged.
        **({"op_offload": prompt_offload(p)} if p.n_gpu_layers > 0 else {}),
        "arch": rt.metadata.get("general.architecture", ""),
        "n_layer": int(llama_cpp.llama_model_n_layer(rt.model)),
        "n_embd": int(llama_cpp.llama_model_n_embd(rt.model)),
        "n_head_kv": int(llama_cpp.llama_model_n_head_kv(rt.model)),
        "n_swa": int(llama_cpp.llama_model_n_swa(rt.model)),
        "chat_template": hashlib.blake2b(rt.template.text.encode("utf-8"), digest_size=16).hexdigest(),
        # Sliding-window and recurrent models: chunks carry what a restore at their end needs (swa_lo,
        # state_end); files saved before they did are not offered (another fingerprint). Dense: unchanged.
        # ``marks``: where every reading of a prompt stops (hisho.core.kv.marks): cells read in other slices
        # round differently, so files read at the old 512-token marks are not offered either.
        **({} if rt.keeper.dense else {"memory": rt.keeper.kind, "resume_facts": 1,
                                       "marks": rt.keeper.interval}),
        # An image's cells are what this projector made of it (docs/images.md); a text-only load is unchanged.
        **({"projector": gguf_identity(rt.vision.path)} if rt.vision is not None else {}),
    }
