"""Compiled fast paths (numba) of :mod:`isobench.nvmsim.model`, and the one-pass LRU sweep.

Each function reproduces the reference loop event for event; the tests compare them on
random traces. The sweep sorts every event into the capacities its LRU stack distance
reaches (Mattson et al.) in one pass, so every capacity's result follows from that pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from isobench.nvmsim.devices import Device
from isobench.nvmsim.model import SimConfig, SimResult, summarize_counts
from isobench.nvmsim.trace import READ, Trace


@njit(cache=True)
def _lru(pages, ops, n_pages, capacity, high, low, background, nvm_w, nvm_r, slow_w, slow_r):
    n = pages.shape[0]
    latency = np.empty(n, np.float64)
    prev = np.full(n_pages, -1, np.int64)
    nxt = np.full(n_pages, -1, np.int64)
    resident = np.zeros(n_pages, np.bool_)
    dirty = np.zeros(n_pages, np.bool_)
    head = -1  # least recently written
    tail = -1  # most recently written
    size = 0
    n_dirty = 0
    hits = misses = sync = bg = slow_reads = 0
    for i in range(n):
        page = pages[i]
        if ops[i] == READ:
            if resident[page]:
                latency[i] = nvm_r
            else:
                latency[i] = slow_r
                slow_reads += 1
            continue
        if resident[page]:
            hits += 1
            if not dirty[page]:
                dirty[page] = True
                n_dirty += 1
            if page != tail:  # move to the most recent end
                p, q = prev[page], nxt[page]
                if p == -1:
                    head = q
                else:
                    nxt[p] = q
                prev[q] = p
                prev[page] = tail
                nxt[page] = -1
                nxt[tail] = page
                tail = page
            latency[i] = nvm_w
        else:
            misses += 1
            cost = nvm_w
            if size >= capacity:
                victim = head
                if dirty[victim]:
                    cost += slow_w
                    sync += 1
                    dirty[victim] = False
                    n_dirty -= 1
                head = nxt[victim]
                if head == -1:
                    tail = -1
                else:
                    prev[head] = -1
                resident[victim] = False
                size -= 1
            resident[page] = True
            dirty[page] = True
            n_dirty += 1
            prev[page] = tail
            nxt[page] = -1
            if tail == -1:
                head = page
            else:
                nxt[tail] = page
            tail = page
            size += 1
            latency[i] = cost
        if background and n_dirty > high:
            cursor = head
            while cursor != -1 and n_dirty > low:
                if dirty[cursor]:
                    dirty[cursor] = False
                    n_dirty -= 1
                    bg += 1
                cursor = nxt[cursor]
    return latency, hits, misses, sync, bg, slow_reads, n_dirty


@njit(cache=True)
def _clock(pages, ops, n_pages, capacity, high, low, background, nvm_w, nvm_r, slow_w, slow_r):
    n = pages.shape[0]
    latency = np.empty(n, np.float64)
    frames = np.full(capacity, -1, np.int64)
    slot_of = np.full(n_pages, -1, np.int64)
    refbit = np.zeros(n_pages, np.bool_)
    dirty = np.zeros(n_pages, np.bool_)
    size = 0
    hand = 0
    n_dirty = 0
    hits = misses = sync = bg = slow_reads = 0
    for i in range(n):
        page = pages[i]
        if ops[i] == READ:
            if slot_of[page] >= 0:
                latency[i] = nvm_r
            else:
                latency[i] = slow_r
                slow_reads += 1
            continue
        if slot_of[page] >= 0:
            hits += 1
            if not dirty[page]:
                dirty[page] = True
                n_dirty += 1
            refbit[page] = True
            latency[i] = nvm_w
        else:
            misses += 1
            cost = nvm_w
            if size >= capacity:
                while refbit[frames[hand]]:
                    refbit[frames[hand]] = False
                    hand = (hand + 1) % capacity
                victim = frames[hand]
                if dirty[victim]:
                    cost += slow_w
                    sync += 1
                    dirty[victim] = False
                    n_dirty -= 1
                slot_of[victim] = -1
                frames[hand] = page
                slot_of[page] = hand
                hand = (hand + 1) % capacity
            else:
                frames[size] = page
                slot_of[page] = size
                size += 1
            refbit[page] = False
            dirty[page] = True
            n_dirty += 1
            latency[i] = cost
        if background and n_dirty > high:
            # coldest first: from the hand, pages without a reference bit, then those with one
            for want_ref in (False, True):
                for k in range(size):
                    if n_dirty <= low:
                        break
                    cand = frames[(hand + k) % size]
                    if dirty[cand] and refbit[cand] == want_ref:
                        dirty[cand] = False
                        n_dirty -= 1
                        bg += 1
    return latency, hits, misses, sync, bg, slow_reads, n_dirty


@njit(cache=True)
def _heap_push(hc, hs, hp, size, count, stamp, page):
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if hc[parent] < count or (hc[parent] == count and hs[parent] <= stamp):
            break
        hc[i], hs[i], hp[i] = hc[parent], hs[parent], hp[parent]
        i = parent
    hc[i], hs[i], hp[i] = count, stamp, page
    return size + 1


@njit(cache=True)
def _heap_pop(hc, hs, hp, size):
    size -= 1
    count, stamp, page = hc[size], hs[size], hp[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (hc[right] < hc[child] or (hc[right] == hc[child] and hs[right] < hs[child])):
            child = right
        if count < hc[child] or (count == hc[child] and stamp <= hs[child]):
            break
        hc[i], hs[i], hp[i] = hc[child], hs[child], hp[child]
        i = child
    if size > 0:
        hc[i], hs[i], hp[i] = count, stamp, page
    return size


@njit(cache=True)
def _hot(pages, ops, n_pages, capacity, high, low, background, nvm_w, nvm_r, slow_w, slow_r):
    """Hotness-aware: evict the fewest write-backs so far, ties the least recently written.
    A lazy min-heap keyed (count, last write) finds the victim in O(log) amortized."""
    n = pages.shape[0]
    latency = np.empty(n, np.float64)
    resident = np.zeros(n_pages, np.bool_)
    dirty = np.zeros(n_pages, np.bool_)
    count = np.zeros(n_pages, np.int64)
    stamp = np.full(n_pages, -1, np.int64)
    limit = 4 * capacity + 16
    hc = np.empty(limit + 1, np.int64)
    hs = np.empty(limit + 1, np.int64)
    hp = np.empty(limit + 1, np.int64)
    heap = 0
    size = 0
    n_dirty = 0
    hits = misses = sync = bg = slow_reads = 0
    for i in range(n):
        page = pages[i]
        if ops[i] == READ:
            if resident[page]:
                latency[i] = nvm_r
            else:
                latency[i] = slow_r
                slow_reads += 1
            continue
        if resident[page]:
            hits += 1
            if not dirty[page]:
                dirty[page] = True
                n_dirty += 1
            latency[i] = nvm_w
        else:
            misses += 1
            cost = nvm_w
            if size >= capacity:
                while True:  # pop stale entries until the true minimum
                    c, st, victim = hc[0], hs[0], hp[0]
                    heap = _heap_pop(hc, hs, hp, heap)
                    if resident[victim] and count[victim] == c and stamp[victim] == st:
                        break
                if dirty[victim]:
                    cost += slow_w
                    sync += 1
                    dirty[victim] = False
                    n_dirty -= 1
                resident[victim] = False
                size -= 1
            resident[page] = True
            dirty[page] = True
            n_dirty += 1
            size += 1
            latency[i] = cost
        count[page] += 1
        stamp[page] = i
        if heap == limit:  # too many stale entries: rebuild from the resident pages
            heap = 0
            for p in range(n_pages):
                if resident[p] and p != page:
                    heap = _heap_push(hc, hs, hp, heap, count[p], stamp[p], p)
        heap = _heap_push(hc, hs, hp, heap, count[page], stamp[page], page)
        if background and n_dirty > high:
            m = 0
            cand = np.empty(size, np.int64)
            for p in range(n_pages):
                if resident[p] and dirty[p]:
                    cand[m] = p
                    m += 1
            order = np.argsort(count[cand[:m]] * (n + 1) + stamp[cand[:m]])  # (count, stamp) order
            for r in range(m):
                if n_dirty <= low:
                    break
                p = cand[order[r]]
                dirty[p] = False
                n_dirty -= 1
                bg += 1
    return latency, hits, misses, sync, bg, slow_reads, n_dirty


KERNELS = {"lru": _lru, "clock": _clock, "hot": _hot}


def simulate_fast(trace: Trace, config: SimConfig, nvm: Device, slow: Device) -> SimResult:
    kernel = KERNELS.get(config.policy)
    if kernel is None:
        raise ValueError(f"no fast path for policy {config.policy!r}; use simulate_reference")
    out = kernel(trace.page, trace.op, max(trace.n_pages, 1), config.capacity,
                 config.high_watermark * config.capacity, config.low_watermark * config.capacity,
                 config.background, nvm.page_write_s, nvm.page_read_s, slow.page_write_s, slow.page_read_s)
    latency, hits, misses, sync, bg, slow_reads, dirty = out
    return SimResult(latency, int(hits), int(misses), int(sync), int(bg), int(slow_reads), int(dirty))


FRONT = 256  # depths below this are counted exactly in the time bitmap (see _stack_buckets)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_UNROLL = 4  # bitmap words always counted on the short path: a branch-free common case


@intrinsic
def _popcount(typingctx, x):  # type: ignore[no-untyped-def]
    """Set bits of an integer: one instruction (LLVM ctpop); numba has no builtin."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return builder.ctpop(args[0])

    return x(x), codegen


@njit(cache=True, inline="always")
def _select(words, start, skip):
    """Position of the set bit reached by passing over ``skip`` set bits at positions >= start
    (one must exist). Whole words are passed by their popcount."""
    wi = start >> 6
    x = words[wi] & (_ALL << np.uint64(start & 63))
    c = np.int64(_popcount(x))
    while c <= skip:
        skip -= c
        wi += 1
        x = words[wi]
        c = np.int64(_popcount(x))
    for _ in range(skip):
        x &= x - np.uint64(1)
    # trailing zeros of x: the set bits below its lowest one (numba's own ctz helper is internal API)
    return (wi << 6) + np.int64(_popcount((x & (~x + np.uint64(1))) - np.uint64(1)))


@njit(cache=True)
def _stack_buckets(pages, ops, last, caps, front_size):
    """Histograms, over b = how many of the sorted capacities ``caps`` an event's LRU stack depth
    reaches (len(caps): never written, or deeper than the largest capacity), of writes, of
    min(b, capacities already full) for writes (a miss in a full cache destages), and of reads.

    Pages are not kept in a list. Each write gets a time stamp (0, 1, ...); a bitmap over time
    holds the *live* stamps, each page's latest, so a page's stack depth is the number of live
    stamps after its own, and it lies inside capacity c iff its stamp is not older than the
    c-th newest live stamp, the boundary of c. All steps touch a few words of the bitmap near
    a boundary or near the present instead of a random page's list node.
    - Depths below F = min(front_size, largest capacity) are counted exactly with popcounts
      (a page inside F has fewer than F live stamps after it) and mapped to b by a table,
      so the small capacities need no boundary at all; F's boundary moves eagerly, one set
      bit at a time (the bitmap is dense near the present).
    - Each larger capacity's boundary moves lazily: a write from outside it (which pushes its
      last page out) only counts a pending step; the boundary is computed (passing that many
      set bits) when a page's stamp is not older than the stale position, the only case
      where the stale one cannot decide. A stamp cleared behind a stale boundary (a page
      rewritten) is either older than the stale position or the boundary itself, which then
      correctly becomes the next live stamp.
    ``last``: the page's latest stamp, all -1 on entry (int32 where stamps fit: less cache).
    """
    n = pages.shape[0]
    n_caps = caps.shape[0]
    front = min(front_size, caps[n_caps - 1])
    n_small = 0  # capacities <= front: found from an exact depth
    while n_small < n_caps and caps[n_small] <= front:
        n_small += 1
    small_b = np.zeros(front, np.int64)  # b of a page at depth d < front
    for d in range(front):
        c = 0
        while c < n_caps and caps[c] <= d:
            c += 1
        small_b[d] = c
    big = caps[n_small:]
    n_big = big.shape[0]
    pos = np.zeros(n_big, np.int64)  # at or behind big capacity k's boundary (0 while not full)
    pending = np.zeros(n_big, np.int64)  # set bits from pos to the boundary
    words = np.zeros((n >> 6) + _UNROLL + 1, np.uint64)  # bit s: stamp s is a page's latest
    front_bound = 0  # stamp of the page at depth front-1 (0 while fewer pages)
    oldest = 0  # no live stamp before it
    write_hist = np.zeros(n_caps + 1, np.int64)
    sync_shift = np.zeros(n_caps + 1, np.int64)  # sync histogram minus write_hist
    read_hist = np.zeros(n_caps + 1, np.int64)
    full = 0  # capacities already full: caps[k] <= distinct pages written so far
    full_big = 0
    distinct = 0
    now = 0  # the next stamp
    one = np.uint64(1)
    for i in range(n):
        page = pages[i]
        t = np.int64(last[page])
        j = 0  # big capacities the page lies outside of
        if t >= front_bound:  # depth < front: count the live stamps after t
            wi = t >> 6
            d = np.int64(_popcount(words[wi] & ~((np.uint64(2) << np.uint64(t & 63)) - one)))
            for q in range(1, _UNROLL):  # words past the present are still 0
                d += np.int64(_popcount(words[wi + q]))
            wi += _UNROLL - 1
            top = (now - 1) >> 6
            while wi < top:
                wi += 1
                d += np.int64(_popcount(words[wi]))
            b = small_b[d]
        else:
            step = 1 if ops[i] != READ else 0  # a write pushes one page out of each
            while j < n_big:
                if t < pos[j]:
                    pending[j] += step  # (pending of a capacity not yet full is reset when it fills)
                    j += 1
                    continue
                if j >= full_big:
                    break
                if pending[j] != 0:
                    pos[j] = _select(words, pos[j], pending[j])
                    pending[j] = 0
                    if t < pos[j]:
                        pending[j] += step
                        j += 1
                        continue
                break
            b = n_small + j
        if ops[i] == READ:
            read_hist[b] += 1
            continue
        write_hist[b] += 1
        if b > full:  # only full caches destage: a rare case (new pages while filling)
            sync_shift[b] -= 1
            sync_shift[full] += 1
        if t >= 0:
            words[t >> 6] &= ~(one << np.uint64(t & 63))
        words[now >> 6] |= one << np.uint64(now & 63)
        last[page] = now
        if distinct >= front:
            if t < front_bound:  # from outside: the boundary page is pushed out
                front_bound = _select(words, front_bound + 1, 0)
            elif t == front_bound:  # the boundary page itself moved to the top
                front_bound = _select(words, t + 1, 0)
        if t < 0:
            distinct += 1
            while full < n_caps and caps[full] <= distinct:
                full += 1
            if distinct == front:
                oldest = _select(words, oldest, 0)
                front_bound = oldest
            while full_big < n_big and big[full_big] <= distinct:
                oldest = _select(words, oldest, 0)
                pos[full_big] = oldest
                pending[full_big] = 0
                full_big += 1
        now += 1
    return write_hist, write_hist + sync_shift, read_hist


def _lru_buckets(pages: np.ndarray, ops: np.ndarray, n_pages: int, caps: np.ndarray,
                 front_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """See _stack_buckets; ``caps``: sorted, at least one."""
    last = np.full(n_pages, -1, np.int32 if len(pages) < 2**31 else np.int64)
    return _stack_buckets(pages, ops, last, caps, front_size)


def sweep_lru(trace: Trace, capacities: list[int], nvm: Device, slow: Device) -> list[dict[str, float]]:
    """The LRU system without background destage, for every capacity, from one pass. Without
    background destage every resident page is dirty, and the buffer ends holding min(capacity,
    footprint) pages: that is each capacity's drain (``drain_pages``, ``mean_drained_s``)."""
    if not capacities:
        return []
    caps = np.array(sorted(set(capacities)), dtype=np.int64)
    write_b, sync_b, read_b = _lru_buckets(trace.page, trace.op, max(trace.n_pages, 1), caps, FRONT)
    # an event with bucket b misses in caches 0..b-1 and hits in caches b..
    hits_upto = np.cumsum(write_b)  # writes with bucket <= k hit in cache k
    sync_from = sync_b[::-1].cumsum()[::-1]  # writes with min(bucket, full) > k destage in cache k
    read_hits_upto = np.cumsum(read_b)
    n_w, n_r = int(write_b.sum()), int(read_b.sum())
    footprint = trace.footprint()
    values = np.array([nvm.page_write_s, nvm.page_write_s + slow.page_write_s, nvm.page_read_s,
                       slow.page_read_s])
    rows = []
    for k, capacity in enumerate(caps.tolist()):
        hits = int(hits_upto[k])
        sync = int(sync_from[k + 1])
        read_hits = int(read_hits_upto[k])
        counts = np.array([n_w - sync, sync, read_hits, n_r - read_hits])
        summary = summarize_counts(values, counts)
        drain = min(capacity, footprint)
        drained = (summary["mean_s"] * (n_w + n_r) + drain * slow.page_write_s) / (n_w + n_r) if n_w + n_r else 0.0
        rows.append({"capacity": capacity, "hits": hits, "misses": n_w - hits, "sync_destages": sync,
                     "slow_reads": n_r - read_hits, **summary, "drain_pages": drain, "mean_drained_s": drained})
    by_capacity = {row["capacity"]: row for row in rows}
    return [by_capacity[c] for c in capacities]
