"""CPU thread counts for llama.cpp chosen by measurement, step by step (docs/threads.md).

Why: ggml's CPU backend (OpenMP in the build pip makes) splits every graph node over its threads and makes them
meet at a barrier after it; a thread that arrives first spins. When another program holds a core, the partner
it waits for is descheduled for a whole time slice, hundreds of times per token: on a 2-core laptop with one
busy program per core, 2-thread decode fell from ~145 to ~2 tok/s while 1 thread kept ~70. No fixed count is
right (the idle machine wants all cores), and the load changes while the app runs.

Policy, per kind of step (decode, small batch, prefill), engine thread only:
- ``choose()`` before a step gives the thread count; ``observe()`` after it gives the step's wall time and
  token count. Costs are compared per token and only against costs measured on this machine in this run.
- Start: at load the runtime times one decode step at each count (``calibrated``) and starts from the fastest,
  so an engine started on a busy machine does not begin with collapsed steps.
- Drop: three decode steps (one prefill step) in a row at ``n`` threads that cost more than ``DROP`` × the last measured cost at ``n - 1``
  (at first: an optimistic guess from the cost at ``n``) go down a thread; one step far slower (a collapse): down
  to half at once. A drop in one kind of step moves the others too (contention is the machine's).
- Recover: a probe runs ``n + 1`` threads for a step or two and keeps them if they are faster than what ``n``
  gives now. Probes come after a back-off that doubles with every failed probe (``PROBE_MIN_S`` up to
  ``PROBE_MAX_S``, and never sooner than ``PROBE_SPACING`` steps' time), or early when the CPU shows idle time for the threads we gave up (psutil's system-wide
  idle time; a free core is the signal that the other program stopped). A probe that comes due while the CPU
  shows no idle time at all is put off (the wait doubles) until the longest wait.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("hisho.engine")

DROP = 1.25           # a step at n threads this much slower than n - 1 threads' last cost counts as contended.
# Not less: on a 2-core laptop 2 threads decode only ~1.3x faster than 1 (the default model, measured), so a few
# steps disturbed by the app's own threads would otherwise drop a thread on an idle machine and cost ~25 %; a real
# collapse is many times slower (COLLAPSE) and milder contention costs us at most DROP while we keep the thread.
COLLAPSE = 3.0        # this much slower: drop to half at once
PROBE_MIN_S = 8.0     # first probe after a drop (a failed probe step beside busy programs can take a second)
PROBE_GIVE_UP = 1.5   # a probe step this much slower than the current count ends the probe at once
PROBE_MAX_S = 60.0    # longest wait between probes while probes keep failing
PROBE_SPACING = 10    # and at least this many steps' time between probes (prefill steps take seconds)
IDLE_CHECK_S = 0.5    # how often the system's idle CPU time is read while below the maximum
IDLE_FREE = 0.6       # idle cores (per thread given up) that trigger an early probe
IDLE_NONE = 0.1       # fewer idle cores than this (per thread given up): a due probe waits longer instead
PRIOR_SPEEDUP = 0.85  # before n - 1 threads were measured: assume n threads ran 85 % of linear speed-up


def cpu_idle_seconds() -> float | None:
    """Seconds all CPUs spent idle since boot (None if unknown)."""
    try:
        import psutil

        return float(psutil.cpu_times().idle)
    except Exception:  # psutil missing or unsupported platform: probes fall back to the back-off alone
        return None


class Governor:
    """Thread count for one kind of step. ``fixed`` > 0: always that many (the user's setting), no measuring
    beyond what ``explain()`` reports."""

    def __init__(self, kind: str, max_threads: int, *, fixed: int = 0, probe_steps: int = 2,
                 decide_steps: int = 3, min_tokens: int = 1, clock: Callable[[], float] = time.monotonic,
                 idle_seconds: Callable[[], float | None] = cpu_idle_seconds) -> None:
        self.kind = kind
        self.max = max(1, fixed or max_threads)
        self.fixed = fixed > 0
        self.current = self.max
        self.probe_steps = max(1, probe_steps)
        self.decide_steps = max(1, decide_steps)
        self.min_tokens = min_tokens
        self._clock = clock
        self._idle_seconds = idle_seconds
        self.last: dict[int, float] = {}  # the latest median cost per token at each thread count
        self.best: dict[int, float] = {}  # the lowest median cost seen at each thread count
        self.quiet: float | None = None   # the lowest median cost seen at the maximum (the machine quiet)
        self._recent: deque[float] = deque(maxlen=max(3, self.decide_steps))
        self._probe: list[float] | None = None  # costs at current + 1 while a probe runs
        self._backoff = PROBE_MIN_S
        self._next_probe = 0.0
        self._idle_mark: tuple[float, float] | None = None  # (clock, idle seconds) at the last idle check
        self._free: float | None = None  # idle cores over the last idle check's window
        self.changes = 0
        self.why = "no step measured yet"
        self._tokens = 1
        self.peers: list[Governor] = []  # the other kinds of step: contention is the machine's, not the kind's

    # ----- the two calls the runtime makes ---------------------------------------------------------------

    def choose(self) -> int:
        if self.fixed or self.current >= self.max:
            return self.current
        if self._probe is None and self._probe_due():
            self._probe = []
        return self.current + 1 if self._probe is not None else self.current

    def observe(self, threads: int, seconds: float, tokens: int) -> None:
        if tokens < self.min_tokens or seconds <= 0:
            return
        cost = seconds / tokens
        self._tokens = tokens
        if self.fixed:
            self.last[threads] = cost
            self.why = "the number set in Settings"
            return
        if self._probe is not None and threads == self.current + 1:
            self._probe.append(cost)
            here = self.last.get(self.current, cost)
            if len(self._probe) >= self.probe_steps or cost > PROBE_GIVE_UP * here:
                self._end_probe()  # a probe step far slower than now needs no second step to say so
            return
        if threads != self.current:
            return  # a step chosen before a change (cannot happen on one thread; be safe)
        self._recent.append(cost)
        now = statistics.median(self._recent)
        self.last[threads] = now
        enough = len(self._recent) >= self.decide_steps
        if enough and now < self.best.get(threads, now + 1):
            self.best[threads] = now
        if threads == self.max and enough and (self.quiet is None or now < self.quiet):
            self.quiet = now
            self.why = f"steps run at this machine's quiet speed ({_ms(now)} per token)"
        if threads > 1 and cost > COLLAPSE * self._reference(threads - 1):
            self._maybe_drop(cost)  # one collapsed step is evidence enough: another costs up to a second
        elif threads > 1 and enough:
            self._maybe_drop(min(list(self._recent)[-self.decide_steps:]))

    # ----- decisions --------------------------------------------------------------------------------------

    def _reference(self, threads: int) -> float:
        """The cost per token to expect at ``threads``: measured, or guessed from the current count."""
        if threads in self.last:
            return self.last[threads]
        base = self.best.get(self.current, self.last[self.current])
        return base * self.current / threads / PRIOR_SPEEDUP

    def _maybe_drop(self, slow: float) -> None:
        """``slow``: the fastest of the last ``decide_steps`` steps at the current count."""
        lower = self.current - 1
        ref = self._reference(lower)
        if slow <= DROP * ref:
            return
        target = max(1, self.current // 2) if slow > COLLAPSE * ref else lower
        why = (f"other programs are using the CPU (a {self.kind} step cost {_ms(slow)} per token at "
               f"{self.current} threads, {_ms(ref)} expected at {lower})")
        self._set(target, why)
        self._backoff = PROBE_MIN_S
        self._schedule_probe()
        for peer in self.peers:
            peer.adopt(target, why)

    def _end_probe(self) -> None:
        assert self._probe is not None
        tried = statistics.median(self._probe)
        here = self.last.get(self.current, tried)
        up = self.current + 1
        self.last[up] = tried
        self._probe = None
        if tried < here:
            why = f"a probe ran faster ({_ms(tried)} per token at {up} threads, {_ms(here)} at {up - 1})"
            self._set(up, why)
            self._backoff = PROBE_MIN_S
            self._schedule_probe()
            for peer in self.peers:
                peer.adopt(up, f"a {self.kind} probe: {why}")
        else:
            self._backoff = min(PROBE_MAX_S, self._backoff * 2)
            self._schedule_probe()
            self.why = (f"other programs are using the CPU (a probe at {up} threads cost {_ms(tried)} per "
                        f"token, {_ms(here)} at {self.current}); next probe in {self._backoff:.0f} s")
        self._idle_mark = None

    def _schedule_probe(self) -> None:
        step = self.last.get(self.current, 0.0) * max(1, self._tokens)
        self._next_probe = self._clock() + max(self._backoff, PROBE_SPACING * step)

    def adopt(self, threads: int, why: str) -> None:
        """Another kind of step found the machine busy (or free again): start from its count, probe as usual."""
        if self.fixed or threads == self.current:
            return
        self._probe = None
        self._set(min(threads, self.max), why)
        self._backoff = PROBE_MIN_S
        self._schedule_probe()

    def calibrated(self, costs: dict[int, float]) -> None:
        """Step costs measured at load (``Runtime`` decodes one token at a few counts): start from the fastest."""
        if self.fixed or not costs:
            return
        self.last.update(costs)
        best = min(costs, key=lambda n: costs[n])
        if best < self.current and costs[best] * DROP < costs.get(self.current, float("inf")):
            self._set(best, "other programs are using the CPU (at load a step cost "
                      + ", ".join(f"{_ms(costs[n])} at {n}" for n in sorted(costs)) + ")")
            self._backoff = PROBE_MIN_S
            self._schedule_probe()
            for peer in self.peers:
                peer.adopt(best, self.why)

    def _probe_due(self) -> bool:
        now = self._clock()
        if self._cores_free(now):
            return True
        if now < self._next_probe:
            return False
        if (self._free is not None and self._free < IDLE_NONE * (self.max - self.current)
                and self._backoff < PROBE_MAX_S and self._slowed()):
            # The back-off ran out but the CPU has had no idle time: a probe would only cost a collapsed step.
            # Wait longer; at the longest wait probe anyway (a nice'd or SCHED_IDLE program also leaves no idle
            # time, yet does not slow us down).
            self._backoff = min(PROBE_MAX_S, self._backoff * 2)
            self._schedule_probe()
            return False
        return True

    def _slowed(self) -> bool:
        """True when steps at the current count run slower than their best here: the busy program competes with
        us. A low-priority (nice'd, SCHED_IDLE) program that takes every idle cycle leaves no idle time either,
        but yields to us at once, so our steps keep their best speed; then a due probe is not put off."""
        now, best = self.last.get(self.current), self.best.get(self.current)
        return now is None or best is None or now > DROP * best

    def _cores_free(self, now: float) -> bool:
        """True when the system was idle for about the threads we gave up since the last check."""
        if self._idle_mark is not None and now - self._idle_mark[0] < IDLE_CHECK_S:
            return False
        idle = self._idle_seconds()
        if idle is None:
            return False
        mark, self._idle_mark = self._idle_mark, (now, idle)
        if mark is None:
            return False
        self._free = (idle - mark[1]) / max(1e-6, now - mark[0])
        return self._free >= IDLE_FREE * (self.max - self.current)

    def _set(self, threads: int, why: str) -> None:
        if threads != self.current:
            log.info("%s threads %d -> %d: %s", self.kind, self.current, threads, why)
            self.changes += 1
        self.current = threads
        self._recent.clear()
        self._idle_mark = None
        self.why = why

    def explain(self) -> dict[str, object]:
        """What the governor chose and why (settings page, status bar, bench JSON)."""
        cost = self.last.get(self.current)
        return {"kind": self.kind, "threads": self.current, "max": self.max, "automatic": not self.fixed,
                "why": self.why, "changes": self.changes,
                "ms_per_token": round(cost * 1000, 3) if cost else None,
                "quiet_ms_per_token": round(self.quiet * 1000, 3) if self.quiet else None}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
