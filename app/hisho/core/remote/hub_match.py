"""A hub model too big for this computer, run on a remote engine instead (the Models page's "Run on <engine>").
No Qt.

A remote server loads its own models; Hisho cannot make it download one. So "run it there" means: if the server
already serves that file, answer from it; otherwise show the one command that starts llama-server with it on
that machine (llama-server downloads it itself with ``-hf repo:quant``).

How a served model is recognised: llama-server names a model by its ``--alias``, else by the path it was started
with (``/models/Qwen3-32B-Q4_K_M.gguf``), or by ``repo:quant`` when started with ``-hf``; vLLM and SGLang by the
repository or path. ``served_as`` accepts any of those.
"""

from __future__ import annotations

import re

_PART = re.compile(r"-\d{5}-of-\d{5}$")


def _stem(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    base = base[:-5] if base.endswith(".gguf") else base
    return _PART.sub("", base)


def served_as(models: list[str], repo: str, file_name: str, quant: str) -> str:
    """The id under which the server serves ``file_name`` of ``repo`` ('' when it does not serve it)."""
    stem = _stem(file_name)
    repo_l = repo.lower()
    for model in models:
        m = model.lower()
        if stem and (_stem(m) == stem or stem in m):
            return model
        if m == repo_l or (quant and m == f"{repo_l}:{quant.lower()}"):
            return model
    return ""


def serve_command(repo: str, quant: str, port: int = 8080) -> str:
    """What to run on the bigger machine so it serves that file to Hisho (docs/remote-engines.md)."""
    tag = f":{quant}" if quant else ""
    return (f"llama-server -hf {repo}{tag} --host 0.0.0.0 --port {port} --parallel 2 "
            "--slot-save-path ~/.cache/llama-slots --api-key YOUR_KEY")
