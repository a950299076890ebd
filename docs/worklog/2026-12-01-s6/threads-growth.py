"""Step cost vs KV cells on the bundled model, at 1 and 2 threads (docs/threads.md, "Context length is not
contention"). Uses hisho's Runtime (the engine's context parameters) and drives llama_decode directly.

    flock /tmp/hisho-bench.lock /work/shared/tools/quiet.sh .venv/bin/python THIS [REPS] [SIZES]

REPS: steps per cell (the fastest is printed, and the median); SIZES: comma-separated token counts (1,4,17; the
table's 512-token row was a separate run with SIZES 512, 3 steps each)."""
import dataclasses
import json
import statistics
import sys
import time

import llama_cpp
from hisho.core.launch import load_params_for, open_model
from hisho.engine.runtime import Runtime

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SIZES = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1,4,17").split(",")]
LEVELS = [0, 512, 1024, 2048, 3072, 4096]
path = open_model(None)
params = load_params_for(path, n_ctx=4608 + 256)
params = dataclasses.replace(params, n_threads=2)   # fixed: no governor changes, no calibration
rt = Runtime.load(params)
print(json.dumps({"model": str(path), "n_ctx": rt.n_ctx, "flash_attn": params.flash_attn, "kv": params.type_k}), flush=True)
toks = rt.tokenize("Item 1 is a red box holding 7 apples. " * 800)
ctx, batch = rt.ctx, rt.batch
held = 0

def step(n_tok, threads):
    llama_cpp.llama_set_n_threads(ctx, threads, threads)
    batch.clear()
    for i in range(n_tok):
        batch.add(toks[(held + i) % len(toks)], held + i, 0, i == n_tok - 1)
    t = time.perf_counter()
    rc = llama_cpp.llama_decode(ctx, batch.raw)
    dt = time.perf_counter() - t
    assert rc == 0, rc
    llama_cpp.llama_memory_seq_rm(rt.memory, 0, held, -1)
    return dt

step(1, 2)  # warm-up: the first graph, page faults
step(17, 2)
out = []
for level in LEVELS:
    while held < level:  # fill to the level with 512-token prefill at 2 threads
        n = min(512, level - held)
        llama_cpp.llama_set_n_threads(ctx, 2, 2)
        batch.clear()
        for i in range(n):
            batch.add(toks[(held + i) % len(toks)], held + i, 0, False)
        assert llama_cpp.llama_decode(ctx, batch.raw) == 0
        held += n
    row = {"cells": held}
    for n_tok in SIZES:
        kind = "decode" if n_tok == 1 else f"b{n_tok}"
        for threads in (1, 2):
            xs = sorted(step(n_tok, threads) * 1000 for _ in range(REPS))
            row[f"{kind}_{threads}"] = round(xs[0], 2)
            row[f"{kind}_{threads}_med"] = round(statistics.median(xs), 2)
    print(json.dumps(row), flush=True)
