"""CPU thread counts for llama.cpp chosen by measurement, step by step (docs/threads.md).

Why: ggml's CPU backend (OpenMP in the build pip makes) splits every graph node over its threads and makes them
meet at a barrier after it; a thread that arrives first spins. When another program holds a core, the partner
it waits for is descheduled for a whole time slice, hundreds of times per token: on a 2-core laptop with one
busy program per core, 2-thread decode fell from ~145 to ~2 tok/s while 1 thread kept ~70. No fixed count is
right (the idle machine wants all cores), and the load changes while the app runs.

Policy, per kind of step (decode, small batch, prefill), engine thread only:
- ``choose()`` before a step gives the thread count; ``observe()`` after it gives the step's wall time. Both
  get the step's shape: its token count and the KV cells it attends over. Costs are compared per token (prefill)
  or per step, only against costs measured on this machine in this run, and only between steps of a similar
  shape (``SIMILAR``): on the default model a decode step at 4K cells costs 3x one on an empty context, for
  attention alone, and a 17-token batch step 3x a 4-token one; neither is contention (docs/threads.md).
- Start: at load the runtime times one decode step at each count (``calibrated``) and starts from the fastest,
  so an engine started on a busy machine does not begin with collapsed steps. Those single steps are only a
  start: a drop judged against them earns a check first (below).
- Drop: when the mean cost of the last ``WINDOW`` decode steps (one prefill step) at ``n`` threads is more than
  ``DROP`` × the cost at ``n - 1`` for that shape (measured there, or guessed from ``n``'s best cost at that
  shape), go down a thread; two steps in a row far slower (a collapse): down to half at once. The mean, not the
  fastest or the median: throughput is what a thread is worth, and the app's own bursts of work slow a few
  steps in a row without making one thread faster. A drop in one kind of step moves the others too
  (contention is the machine's).
- Check: when neither reference is of the step's shape (a restored conversation, a long prompt, a context
  that grew since ``n - 1`` was measured), the same evidence only earns a check: the next step of that shape
  runs at the lower count once. Faster there: a drop, as above. Not faster: the context made the step slow; the
  check's cost becomes the lower count's reference for that shape and the threads stay.
- Recover: a probe runs ``n + 1`` threads for ``WINDOW`` steps (one prefill step) and keeps them if their mean
  cost is lower than what ``n`` gives now; a collapsed probe step ends it at once. Probes come after a back-off that doubles with every failed probe (``PROBE_MIN_S`` up to
  ``PROBE_MAX_S``, and never sooner than ``PROBE_SPACING`` steps' time), or early when the CPU shows idle time for the threads we gave up (psutil's system-wide
  idle time; a free core is the signal that the other program stopped). A probe that comes due while the CPU
  shows no idle time at all is put off (the wait doubles) until the longest wait. A failed probe also waits long
  enough that what it cost stays under ``PROBE_SHARE`` of the time: beside busy programs one collapsed 2-thread
  step can take seconds (3.1 s against 28 ms at one thread, seen on a 2-core machine), and every such probe is a
  stall the user sees in the reply; the early probe on idle cores still comes as soon as the other program stops.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger("hisho.engine")

DROP = 1.25           # a step at n threads this much slower than n - 1 threads' cost counts as contended.
# Not less: on a 2-core laptop 2 threads decode only ~1.3x faster than 1 (the default model, measured), so a few
# steps disturbed by the app's own threads would otherwise drop a thread on an idle machine and cost ~25 %; a real
# collapse is many times slower (COLLAPSE) and milder contention costs us at most DROP while we keep the thread.
COLLAPSE = 3.0        # this much slower, two steps in a row: drop to half at once
WINDOW = 8            # decode and batch steps: the drop rule and a probe judge the mean of this many steps.
# The app's own threads (the API server, the window, the client's reader) wake in bursts every few steps: runs
# of three 2-thread steps at 1.3x their usual cost were common while the API streamed, and the old rule (the
# fastest of 3 such steps over 1.25x one thread's cost) dropped a thread that was still worth 35 % of the
# throughput (bench api, one stream: 129 tok/s at 2 fixed threads, 81 after the drop). Throughput is the mean
# cost per token, so the mean is what is judged; a busy program's collapse is many times slower and still
# drops within two steps.
SIMILAR = 1.25        # steps within this factor of each other in tokens times KV cells are compared directly
CELLS_FLOOR = 256     # below this many KV cells a step's cost hardly depends on the context (the weights dominate)
PROBE_MIN_S = 8.0     # first probe after a drop (a failed probe step beside busy programs can take a second)
REFERENCE_STEPS = 3   # like steps whose median may stand as a count's best cost (the window judges, this learns)
PROBE_GIVE_UP = COLLAPSE  # a probe step this much slower than the current count ends the probe at once
PROBE_MAX_S = 60.0    # longest wait between probes while probes keep failing
PROBE_SPACING = 10    # and at least this many steps' time between probes (prefill steps take seconds)
PROBE_SHARE = 0.02    # a failed probe's lost time (beyond the current count's cost) is at most this share of the wait
PROBE_COST_MAX_S = 300.0  # the longest wait that share asks for (a collapsed prefill probe can cost a minute)
IDLE_CHECK_S = 0.5    # how often the system's idle CPU time is read while below the maximum
IDLE_FREE = 0.6       # idle cores (per thread given up) that trigger an early probe
IDLE_NONE = 0.1       # fewer idle cores than this (per thread given up): a due probe waits longer instead
PRIOR_SPEEDUP = 0.85  # before n - 1 threads were measured: assume n threads ran 85 % of linear speed-up
SHAPES_KEPT = 8       # costs kept per thread count, one per shape (a chat, a restored long one, a prompt's slices)


def cpu_idle_seconds() -> float | None:
    """Seconds all CPUs spent idle since boot (None if unknown)."""
    try:
        import psutil

        return float(psutil.cpu_times().idle)
    except Exception:  # psutil missing or unsupported platform: probes fall back to the back-off alone
        return None


class Shape(NamedTuple):
    """What a step's cost depends on besides the machine: its tokens and the KV cells it attends over."""

    tokens: int = 1
    cells: int = 0

    def like(self, other: Shape) -> bool:
        """Close enough that their costs compare: the ratio of their token counts times the ratio of their cells
        (counted from ``CELLS_FLOOR``) is at most ``SIMILAR``. A step's cost (the weights, plus attention over the
        cells for each token) grows at most in proportion to either, and so does a cost per token as the tokens
        shrink, so two quiet steps of like shapes differ by at most ``SIMILAR``."""
        a = self.cells if self.cells > CELLS_FLOOR else CELLS_FLOOR  # called a few times a step: no max()
        b = other.cells if other.cells > CELLS_FLOOR else CELLS_FLOOR
        t, u = self.tokens, other.tokens
        if t < u:
            t, u = u, t
        if a < b:
            a, b = b, a
        return t * a <= SIMILAR * u * b


class Cost(NamedTuple):
    """A cost (seconds per token or per step) and the shape of the steps it was measured on."""

    cost: float
    shape: Shape


class _Check(NamedTuple):
    target: int   # the count the evidence would drop to
    slow: float   # the evidence: the cost at the current count
    shape: Shape
    why: str


class Governor:
    """Thread count for one kind of step. ``fixed`` > 0: always that many (the user's setting), no measuring
    beyond what ``explain()`` reports. ``per_token``: costs are compared per token (prefill), else per step."""

    def __init__(self, kind: str, max_threads: int, *, fixed: int = 0, probe_steps: int = WINDOW,
                 decide_steps: int = WINDOW, min_tokens: int = 1, per_token: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 idle_seconds: Callable[[], float | None] = cpu_idle_seconds) -> None:
        self.kind = kind
        self.max = max(1, fixed or max_threads)
        self.fixed = fixed > 0
        self.current = self.max
        self.probe_steps = max(1, probe_steps)
        self.decide_steps = max(1, decide_steps)
        self.min_tokens = min_tokens
        self.per_token = per_token
        self._clock = clock
        self._idle_seconds = idle_seconds
        self.last: dict[int, Cost] = {}  # the latest median cost at each thread count
        self.seen: dict[int, list[Cost]] = {}  # the latest median cost at each count, per shape
        self.best: dict[int, list[Cost]] = {}  # the lowest median cost at each count, per shape
        self.quiet: float | None = None   # the lowest median cost seen at the maximum (the machine quiet)
        self._recent: deque[float] = deque(maxlen=max(3, self.decide_steps))  # steps of like shapes
        self._recent_shape: Shape | None = None
        self._probe: list[float] | None = None  # costs at current + 1 while a probe runs
        self._probe_shape = Shape()
        self._check: _Check | None = None
        self._backoff = PROBE_MIN_S
        self._probe_floor = 0.0  # the wait a costly failed probe asks for (PROBE_SHARE), until a change
        self._probe_failed = False  # this kind's last probe at one more thread failed (until a change of count)
        self._next_probe = 0.0
        self._idle_mark: tuple[float, float] | None = None  # (clock, idle seconds) at the last idle check
        self._free: float | None = None  # idle cores over the last idle check's window
        self.changes = 0
        self.checks = 0
        self.why = "no step measured yet"
        self._tokens = 1
        self.peers: list[Governor] = []  # the other kinds of step: contention is the machine's, not the kind's

    # ----- the two calls the runtime makes ---------------------------------------------------------------

    def choose(self, tokens: int = 1, cells: int = 0) -> int:
        """The thread count for a step of ``tokens`` tokens attending over ``cells`` KV cells."""
        if self.fixed:
            return self.current
        shape = Shape(tokens, cells)
        if self._check is not None and self._check.shape.like(shape):
            return self._check.target
        if self.current >= self.max:
            return self.current
        here = self.last.get(self.current)
        like = here is None or here.shape.like(shape)  # a probe compares steps of one shape
        if self._probe is None and like and self._probe_due():
            self._probe = []
        return self.current + 1 if self._probe is not None and like else self.current

    def observe(self, threads: int, seconds: float, tokens: int, cells: int = 0) -> None:
        if tokens < self.min_tokens or seconds <= 0:
            return
        shape = Shape(tokens, cells)
        per = tokens if self.per_token else 1
        cost = seconds / per
        self._tokens = per
        if self.fixed:
            self.last[threads] = Cost(cost, shape)
            self.why = "the number set in Settings"
            return
        if self._check is not None and threads == self._check.target and self._check.shape.like(shape):
            self._end_check(cost, shape)
            return
        if self._probe is not None and threads == self.current + 1:
            self._probe.append(cost)
            self._probe_shape = shape
            here = self._here(cost)
            if len(self._probe) >= self.probe_steps or cost > PROBE_GIVE_UP * here:
                self._end_probe()  # a probe step far slower than now needs no second step to say so
            return
        if threads != self.current:
            return  # a step chosen before a change (cannot happen on one thread; be safe)
        if self._recent_shape is None or not shape.like(self._recent_shape):
            self._recent.clear()  # a step of another shape: its cost says nothing about the last ones
        self._recent_shape = shape
        self._recent.append(cost)
        enough = len(self._recent) >= self.decide_steps
        settled = len(self._recent) >= min(REFERENCE_STEPS, self.decide_steps)  # enough for a reference
        # Judge the step before learning from it: a contended step must not become the reference.
        if threads > 1 and self._judge(cost, shape, enough):
            return
        now = statistics.median(self._recent)
        self._measured(threads, Cost(now, shape))
        best = _like(self.best.get(threads), shape)
        if settled and (best is None or now < best.cost):
            _keep(self.best.setdefault(threads, []), Cost(now, shape))
        if threads == self.max and settled and (self.quiet is None or now < self.quiet):
            self.quiet = now
            self.why = f"steps run at this machine's quiet speed ({_ms(now)} per token)"

    # ----- decisions --------------------------------------------------------------------------------------

    def _expected(self, threads: int, shape: Shape) -> tuple[float, bool] | None:
        """The cost to expect at ``threads`` (one fewer than now) for a step of ``shape``, and whether it stands
        for that shape: measured at ``threads`` on like steps, or guessed from this count's best cost on like
        steps. Otherwise the nearest we have, for another shape (False). None before any step."""
        measured = _like(self.seen.get(threads), shape)
        if measured is not None:
            return measured.cost, True
        base = _like(self.best.get(self.current), shape)
        if base is not None:
            return base.cost * self.current / threads / PRIOR_SPEEDUP, True
        if threads in self.last:
            return self.last[threads].cost, False
        bests = self.best.get(self.current)
        base = bests[-1] if bests else self.last.get(self.current)
        return (base.cost * self.current / threads / PRIOR_SPEEDUP, False) if base is not None else None

    def _judge(self, cost: float, shape: Shape, enough: bool) -> bool:
        """Drop (or check) when this step, or the last ``decide_steps`` like steps, cost too much. True if so."""
        lower = self.current - 1
        expected = self._expected(lower, shape)
        if expected is None:
            return False
        ref, known = expected
        recent = self._recent  # ends with this step
        if self.decide_steps == 1:
            slow = cost  # prefill: one long step decides
        elif cost > COLLAPSE * ref and len(recent) >= 2 and recent[-2] > COLLAPSE * ref:
            slow = min(cost, recent[-2])  # two collapsed steps in a row: a busy program, not a hiccup of ours
        elif enough:
            slow = _window_mean(list(recent)[-self.decide_steps:])
        else:
            return False
        if slow <= DROP * ref:
            return False
        target = max(1, self.current // 2) if slow > COLLAPSE * ref else lower
        if known:
            self._drop(target, (f"other programs are using the CPU (a {self.kind} step cost {_ms(slow)} per token "
                                f"at {self.current} threads, {_ms(ref)} expected at {lower})"))
        else:
            # Nothing measured at this shape: a longer context or another size may cost this much on a quiet
            # machine. One step at the lower count on a like step tells (hisho.engine.lib.threads docstring).
            self._check = _Check(target, slow, shape,
                                 f"a {self.kind} step cost {_ms(slow)} per token at {self.current} threads")
        return True

    def _drop(self, target: int, why: str) -> None:
        self._set(target, why)
        self._restart_probes()
        for peer in self.peers:
            peer.adopt(target, why)

    def _end_check(self, cost: float, shape: Shape) -> None:
        check, self._check = self._check, None
        assert check is not None
        self.checks += 1
        self._measured(check.target, Cost(cost, shape))
        if cost < check.slow:
            self._drop(check.target, f"other programs are using the CPU ({check.why}, {_ms(cost)} at "
                                     f"{check.target})")
            return
        # The context (or size) made the step slow, not other programs: it is what this count costs here.
        log.info("%s threads stay %d: %s, %s at %d (a longer context, not other programs)", self.kind,
                  self.current, check.why, _ms(cost), check.target)
        self._measured(self.current, Cost(check.slow, check.shape))
        _keep(self.best.setdefault(self.current, []), Cost(check.slow, check.shape))

    def _measured(self, threads: int, cost: Cost) -> None:
        self.last[threads] = cost
        _keep(self.seen.setdefault(threads, []), cost)

    def _here(self, fallback: float) -> float:
        here = self.last.get(self.current)
        return here.cost if here is not None else fallback

    def _end_probe(self) -> None:
        assert self._probe is not None
        tried = _window_mean(self._probe)  # throughput over the probe, as the drop rule judges it
        here = self._here(tried)
        up = self.current + 1
        self._measured(up, Cost(tried, self._probe_shape))
        costs, self._probe = self._probe, None
        if tried < here:
            why = f"a probe ran faster ({_ms(tried)} per token at {up} threads, {_ms(here)} at {up - 1})"
            self._set(up, why)
            self._restart_probes()
            for peer in self.peers:
                peer.adopt(up, f"a {self.kind} probe: {why}")
        else:
            self._probe_failed = True
            self._backoff = min(PROBE_MAX_S, self._backoff * 2)
            lost = max(0.0, sum(costs) - here * len(costs)) * max(1, self._tokens)
            self._probe_floor = min(PROBE_COST_MAX_S, lost / PROBE_SHARE)
            wait = self._schedule_probe()
            self.why = (f"other programs are using the CPU (a probe at {up} threads cost {_ms(tried)} per "
                        f"token, {_ms(here)} at {self.current}); next probe in {wait:.0f} s")
        self._idle_mark = None

    def _restart_probes(self) -> None:
        """After a change of count: the next probe after the shortest back-off, with no failed probe's cost to wait
        out."""
        self._backoff = PROBE_MIN_S
        self._probe_floor = 0.0
        self._probe_failed = False
        self._schedule_probe()

    def _schedule_probe(self) -> float:
        """Set when the next probe may come; returns the wait in seconds."""
        step = self._here(0.0) * max(1, self._tokens)
        wait = max(self._backoff, self._probe_floor, PROBE_SPACING * step)
        self._next_probe = self._clock() + wait
        return wait

    def adopt(self, threads: int, why: str) -> None:
        """Another kind of step found the machine busy (or free again): start from its count, probe as usual.
        More threads are not taken while this kind's own probe at more threads has failed and its wait is not
        over: kinds do not suffer alike beside busy programs (a 48-token prefill step ran a little faster at 2
        threads than at 1 beside two busy loops, where a 2-thread decode step collapsed from 28 ms to 3.1 s), so
        the other kind's passing probe says nothing about this one's. A free core still brings this one back at
        once (its own early probe)."""
        if self.fixed or threads == self.current:
            return
        if threads > self.current and self._probe_failed and self._clock() < self._next_probe:
            log.info("%s threads stay %d: %s, but a %s probe at %d failed (next in %.0f s)", self.kind,
                     self.current, why, self.kind, self.current + 1, self._next_probe - self._clock())
            return
        self._probe = None
        self._set(min(threads, self.max), why)
        self._restart_probes()

    def calibrated(self, costs: dict[int, float], cells: int = 1) -> None:
        """Step costs measured at load (``Runtime`` decodes one token at a few counts): start from the fastest.
        One step per count is a start, not a reference: kept as each count's latest cost only, so a drop judged
        against it earns a check first (``_judge``). A lone fast 1-thread step at load (8.5 ms, against 12.7 ms
        it costs in a reply) had dropped a thread on an idle machine at the start of every reply."""
        if self.fixed or not costs:
            return
        for n, c in costs.items():
            self.last[n] = Cost(c, Shape(1, cells))
        best = min(costs, key=lambda n: costs[n])
        if best < self.current and costs[best] * DROP < costs.get(self.current, float("inf")):
            self._set(best, "other programs are using the CPU (at load a step cost "
                      + ", ".join(f"{_ms(costs[n])} at {n}" for n in sorted(costs)) + ")")
            self._restart_probes()
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
        now = self.last.get(self.current)
        best = _like(self.best.get(self.current), now.shape) if now is not None else None
        return now is None or best is None or now.cost > DROP * best.cost

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
        self._recent_shape = None
        self._check = None
        self._idle_mark = None
        self.why = why

    def explain(self) -> dict[str, object]:
        """What the governor chose and why (settings page, status bar, bench JSON)."""
        cost = self.last.get(self.current)
        return {"kind": self.kind, "threads": self.current, "max": self.max, "automatic": not self.fixed,
                "why": self.why, "changes": self.changes, "checks": self.checks,
                "ms_per_token": round(cost.cost * 1000, 3) if cost else None,
                "quiet_ms_per_token": round(self.quiet * 1000, 3) if self.quiet else None}


def _window_mean(costs: list[float]) -> float:
    """The mean cost of a window of steps without its slowest one: a lone hiccup (a collector pause, a page-fault
    storm: 100 ms among 8 ms steps, seen) would otherwise decide alone; a busy program slows them all."""
    if len(costs) < 3:
        return statistics.fmean(costs)
    return (sum(costs) - max(costs)) / (len(costs) - 1)


def _like(costs: list[Cost] | None, shape: Shape) -> Cost | None:
    """The kept cost of a shape like ``shape`` (the latest such), if any."""
    for c in reversed(costs or ()):
        if c.shape.like(shape):
            return c
    return None


def _keep(costs: list[Cost], cost: Cost) -> None:
    """Keep ``cost`` as its shape's entry: it replaces a like entry (a context that grows moves its entry along),
    else it is added and the oldest shape beyond ``SHAPES_KEPT`` is forgotten."""
    if costs and costs[-1].shape.like(cost.shape):
        costs[-1] = cost  # the usual case: the same shape as the latest
        return
    for i, c in enumerate(costs):
        if c.shape.like(cost.shape):
            del costs[i]
            break
    costs.append(cost)
    del costs[:-SHAPES_KEPT]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
