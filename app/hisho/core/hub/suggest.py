"""Which real model to offer in place of the bundled demo, for this machine, without the network.

The bundled SmolLM2-135M makes chat work offline on any machine, but it is a demo: it copies and repeats rather
than summarizes. ``suggest(budget, profile)`` names, from a short list of well-known instruct GGUF files, the first by
what the person gets (``ranked``): its weights plus a 4K-token f16 KV cache and the compute buffers fit the
budget with the planner's 15 % margin, it answers at 8 tok/s or faster here (``planner.speed``) when one does
(else the fastest that fits), and the larger the better; one already installed is not offered again. Nothing
is suggested before this machine's speed is measured. The first-run card, the Hub tab's suggestions and the
summary's "too small" note all ask ``suggest`` and say its pick with ``offer_line``. It is an estimate from published sizes (no header is read, nothing is downloaded); when the hub can be
reached, the first-start card and the Models page replace it with the planner's verdict from the file's header.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.hub.fit import TIGHT_SHARE
from hisho.core.machine import Budget
from hisho.core.planner.speed import SPEED_FLOOR, Speed, SpeedProfile, prompt_speed
from hisho.core.units import GIB, MIB

DEMO_PARAMS = 135_000_000
COMPUTE_BYTES = 400 * MIB  # llama.cpp's compute buffers and the process around it, at a 512-token batch


@dataclass(frozen=True)
class Candidate:
    title: str            # what the user reads
    repo: str
    file: str
    size: int             # bytes of the Q4_K_M file (published size, rounded)
    params_b: float       # billions of parameters
    kv_4k: int            # f16 KV cache at 4,096 tokens

    @property
    def spec(self) -> str:
        return f"{self.repo}:{self.file}"

    def need(self) -> int:
        return self.size + self.kv_4k + COMPUTE_BYTES

    def line(self) -> str:
        return f"{self.title}, a {self.size / GIB:.1f} GiB download"


# Smallest first. KV at 4K tokens from each model's layers × KV heads × head size × 2 (K and V) × 2 bytes.
CANDIDATES = (
    Candidate("Qwen2.5 1.5B Instruct", "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf",
              1_120 * MIB, 1.5, 112 * MIB),
    Candidate("Llama 3.2 3B Instruct", "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf",
              1_930 * MIB, 3.2, 448 * MIB),
    Candidate("Qwen2.5 7B Instruct", "bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5-7B-Instruct-Q4_K_M.gguf",
              4_470 * MIB, 7.6, 224 * MIB),
)


def estimate(c: Candidate, budget: Budget) -> str:
    """The planner's verdict words for ``c`` from its published size: "fits" with the 15 % margin to spare,
    "tight" within the budget, else "wont_fit" (the hub's header, when read, decides)."""
    room = budget.ram + (0 if budget.unified else budget.gpu)
    if c.need() <= room * TIGHT_SHARE:
        return "fits"
    return "tight" if c.need() <= room else "wont_fit"


def speed_of(c: Candidate, profile: SpeedProfile) -> Speed:
    """``c``'s predicted speed here from its published size and parameters (the header, once read, refines
    it): a decode step reads about the whole file; a prompt token costs a multiply-add per parameter at the
    profile's K-quant rate (``speed.prompt_speed``)."""
    step = profile.step_s + c.size / profile.bandwidth
    return Speed(decode_short=1 / step, decode_4k=1 / (step + c.kv_4k / profile.bandwidth),
                 prompt=prompt_speed(profile, "Q4_K", int(c.params_b * 1e9)), how="predicted")


def ranked(budget: Budget, profile: SpeedProfile | None = None, installed: frozenset[str] = frozenset(),
           floor: float = SPEED_FLOOR) -> list[Candidate]:
    """Every candidate, sorted by what the person gets here: those that fit with room to spare, then tight ones,
    then the ones that do not fit; within each, those that answer at ``floor`` tok/s or faster first (the larger,
    the better the answers), then the slower ones (the faster first). Where this machine's speed is unknown,
    fit and then size decide. ``installed`` does not move a candidate (``suggest`` skips it)."""
    order = {"fits": 0, "tight": 1, "wont_fit": 2}

    def rank(c: Candidate) -> tuple[int, bool, float]:
        if is_slow(c, profile, floor):
            assert profile is not None
            return order[estimate(c, budget)], True, -speed_of(c, profile).decode_short
        return order[estimate(c, budget)], False, -c.params_b

    return sorted(CANDIDATES, key=rank)


def suggest(budget: Budget, profile: SpeedProfile | None, installed: frozenset[str] = frozenset(),
            floor: float = SPEED_FLOOR) -> Candidate | None:
    """The one model every part of the window offers (first-run card, Hub suggestions, the summary's "too small"
    note): the first of ``ranked`` that fits with room to spare and is not installed yet. None before this
    machine's speed is measured (a pick made from memory alone would offer a model too slow to use), and None
    when the machine is smaller than any."""
    if profile is None:
        return None
    return next((c for c in ranked(budget, profile, installed, floor)
                 if estimate(c, budget) == "fits" and c.file not in installed), None)


def offer_line(c: Candidate, profile: SpeedProfile) -> str:
    """The pick in the words every part of the window says it: "Qwen2.5 3B Instruct (a 1.9 GiB download,
    about 14 tok/s on this computer)"."""
    return (f"{c.title} (a {c.size / GIB:.1f} GiB download, about {speed_of(c, profile).decode_short:.0f} tok/s "
            "on this computer)")


def is_slow(c: Candidate, profile: SpeedProfile | None, floor: float = SPEED_FLOOR) -> bool:
    """Whether ``c`` would answer slower than ``floor`` tok/s here (False where this machine's speed is unknown)."""
    return profile is not None and speed_of(c, profile).decode_short < floor


def why_not_larger(pick: Candidate, budget: Budget, profile: SpeedProfile | None,
                   floor: float = SPEED_FLOOR) -> str:
    """Why a larger candidate that fits was not offered (it would answer slower than ``floor`` here), or ""."""
    if profile is None:
        return ""
    slower = [c for c in CANDIDATES[CANDIDATES.index(pick) + 1:] if estimate(c, budget) == "fits"]
    if not slower:
        return ""
    big = slower[-1]
    return (f"{big.title} fits too, but would answer at about {speed_of(big, profile).decode_short:.0f} tok/s on "
            f"this computer (slower than {floor:.0f} tok/s)")


def is_demo(path_or_name: str) -> bool:
    """Whether a model is the bundled demo (by its file or entry name)."""
    from hisho.core.models.store import DEFAULT_MODEL_FILE, DEFAULT_MODEL_NAME

    leaf = path_or_name.replace("\\", "/").rsplit("/", 1)[-1]
    return leaf in (DEFAULT_MODEL_FILE, DEFAULT_MODEL_NAME)
