"""Compiled fast paths (numba) of :mod:`isobench.nvmsim.model`, and the one-pass LRU sweep.

Each function reproduces the reference loop event for event; the tests compare them on
random traces. The sweep computes LRU stack distances once (Mattson et al.) with a
Fenwick tree, so every capacity's result follows from one pass over the trace.
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
    return latency, hits, misses, sync, bg, slow_reads


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
    return latency, hits, misses, sync, bg, slow_reads


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
    return latency, hits, misses, sync, bg, slow_reads


KERNELS = {"lru": _lru, "clock": _clock, "hot": _hot}


def simulate_fast(trace: Trace, config: SimConfig, nvm: Device, slow: Device) -> SimResult:
    kernel = KERNELS.get(config.policy)
    if kernel is None:
        raise ValueError(f"no fast path for policy {config.policy!r}; use simulate_reference")
    out = kernel(trace.page, trace.op, max(trace.n_pages, 1), config.capacity,
                 config.high_watermark * config.capacity, config.low_watermark * config.capacity,
                 config.background, nvm.page_write_s, nvm.page_read_s, slow.page_write_s, slow.page_read_s)
    latency, hits, misses, sync, bg, slow_reads = out
    return SimResult(latency, int(hits), int(misses), int(sync), int(bg), int(slow_reads))


FRONT = 16  # pages kept in a small array at the top of the LRU list (see _lru_buckets)


@njit(cache=True)
def _lru_buckets(pages, ops, n_pages, caps, front_size):
    """Histograms, over b = how many of the sorted capacities ``caps`` an event's LRU stack depth
    reaches (len(caps): never written, or deeper than the largest capacity), of writes, of
    min(b, capacities already full) for writes (a miss in a full cache destages), and of reads.

    One LRU list holds the pages up to the largest capacity, with a marker at the last page
    inside each capacity: an access moves only the markers above the page's old depth, so
    a hit near the top costs a few steps and only deep misses cost len(caps).
    The ``front_size`` most recent pages are also kept in order in a small array: the depth of
    a page there is found by a short scan, and the small capacities (<= front_size) need no
    markers at all; those were half of the marker steps (a page leaving the array lies
    outside every small capacity). Reads look up their page's depth and change nothing.
    """
    n = pages.shape[0]
    n_caps = caps.shape[0]
    largest = caps[n_caps - 1]
    front_n = min(front_size, largest)
    n_small = 0  # capacities that fit in the front array
    while n_small < n_caps and caps[n_small] <= front_n:
        n_small += 1
    small_b = np.zeros(front_n, np.int64)  # b of a page at depth d < front_n
    for d in range(front_n):
        c = 0
        while c < n_caps and caps[c] <= d:
            c += 1
        small_b[d] = c
    front = np.full(front_n, -1, np.int32)  # the most recent pages, most recent first
    in_front = np.zeros(n_pages, np.bool_)
    n_front = 0
    # int32 halves the memory the pointer chasing walks through (pages < 2**31)
    # node[p, 0]: the page above p (towards the most recent); node[p, 1]: how many capacities
    # p's depth reaches (n_caps: not in the list; stale while p is in the front array).
    node = np.empty((n_pages, 2), np.int32)
    node[:, 0] = -1
    node[:, 1] = n_caps
    nxt = np.full(n_pages, -1, np.int32)
    marker = np.full(n_caps, -1, np.int32)  # last page inside capacity k (k >= n_small)
    top = -1
    bottom = -1
    size = 0
    # histograms over buckets 0..n_caps: writes, writes that find cache k full, reads
    write_hist = np.zeros(n_caps + 1, np.int64)
    sync_hist = np.zeros(n_caps + 1, np.int64)
    read_hist = np.zeros(n_caps + 1, np.int64)
    distinct = 0
    full = 0  # capacities already full: caps[k] <= distinct pages written so far
    seen = np.zeros(n_pages, np.bool_)
    for i in range(n):
        page = pages[i]
        d = -1  # depth in the front array, -1: deeper or absent
        if in_front[page]:
            d = 0
            while front[d] != page:
                d += 1
            b = small_b[d]
        else:
            b = node[page, 1]
        if ops[i] == READ:
            read_hist[b] += 1
            continue
        write_hist[b] += 1
        sync_hist[min(b, full)] += 1
        if not seen[page]:
            seen[page] = True
            distinct += 1
            while full < n_caps and caps[full] <= distinct:
                full += 1
        if d == 0:
            continue
        if d > 0:  # within the front: the pages above move down one
            for j in range(d, 0, -1):
                front[j] = front[j - 1]
        else:
            if n_front == front_n:  # the front's last page is pushed out of every small capacity
                pushed = front[front_n - 1]
                in_front[pushed] = False
                node[pushed, 1] = n_small
            else:
                n_front += 1
            for j in range(n_front - 1, 0, -1):
                front[j] = front[j - 1]
            in_front[page] = True
            # every larger capacity the page lies outside of (or all, if absent) loses its last page
            for k in range(n_small, b):
                last = marker[k]
                if last == -1:
                    continue
                node[last, 1] += 1
                up = node[last, 0]
                marker[k] = up if up != -1 else page
        front[0] = page
        if b < n_caps:  # unlink from its old place
            if b >= n_small and marker[b] == page:  # it was the last page inside capacity b
                marker[b] = node[page, 0]
            p, q = node[page, 0], nxt[page]
            if p != -1:
                nxt[p] = q
            if q != -1:
                node[q, 0] = p
            else:
                bottom = p
        else:
            size += 1
        # link at the top
        node[page, 0] = -1
        nxt[page] = top
        if top != -1:
            node[top, 0] = page
        top = page
        if bottom == -1:
            bottom = page
        node[page, 1] = 0
        if b == n_caps:
            for k in range(n_small, n_caps):
                if caps[k] == size:  # the list has just grown to fill capacity k
                    marker[k] = bottom
            if size > largest:  # beyond the largest capacity: drop the deepest page
                gone = bottom
                bottom = node[gone, 0]
                nxt[bottom] = -1
                node[gone, 0] = -1
                node[gone, 1] = n_caps
                size -= 1
    return write_hist, sync_hist, read_hist


def sweep_lru(trace: Trace, capacities: list[int], nvm: Device, slow: Device) -> list[dict[str, float]]:
    """The LRU system without background destage, for every capacity, from one pass."""
    caps = np.array(sorted(set(capacities)), dtype=np.int64)
    write_b, sync_b, read_b = _lru_buckets(trace.page, trace.op, max(trace.n_pages, 1), caps, FRONT)
    # an event with bucket b misses in caches 0..b-1 and hits in caches b..
    hits_upto = np.cumsum(write_b)  # writes with bucket <= k hit in cache k
    sync_from = sync_b[::-1].cumsum()[::-1]  # writes with min(bucket, full) > k destage in cache k
    read_hits_upto = np.cumsum(read_b)
    n_w, n_r = int(write_b.sum()), int(read_b.sum())
    values = np.array([nvm.page_write_s, nvm.page_write_s + slow.page_write_s, nvm.page_read_s,
                       slow.page_read_s])
    rows = []
    for k, capacity in enumerate(caps.tolist()):
        hits = int(hits_upto[k])
        sync = int(sync_from[k + 1])
        read_hits = int(read_hits_upto[k])
        counts = np.array([n_w - sync, sync, read_hits, n_r - read_hits])
        rows.append({"capacity": capacity, "hits": hits, "misses": n_w - hits, "sync_destages": sync,
                     "slow_reads": n_r - read_hits, **summarize_counts(values, counts)})
    by_capacity = {row["capacity"]: row for row in rows}
    return [by_capacity[c] for c in capacities]
