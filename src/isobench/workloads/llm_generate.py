"""llm-generate: autoregressive generation in-process, timed per request and per token.

Per request (``batch_size`` prompts of ``prompt_tokens`` tokens): ``tokenize`` (byte-level
BPE over the prompt texts), ``prefill`` (one forward over the whole prompt, which fills the KV
cache and yields the first token), ``decode`` (one forward per further token over the cache,
each token read back to the host as a server streams it) and ``detokenize``. The loop is
written out rather than ``model.generate`` so that every token is timed. Prefill is bound by
compute and decode by memory bandwidth, so a platform can cost one and not the other.

Per cell (``done.metrics``, stored as ``workload.<name>``): ``ttft`` (tokenize + prefill, the
first token included: the median over requests; ``ttft_mean`` and ``ttft_p90`` too), ``tpot`` (mean time per output token after the first) and ``tpot_p90``
(90th percentile of the inter-token gaps), ``tokens_per_s`` (output tokens of every prompt over
the requests' e2e time) and ``kv_cache_bytes`` (the cache at a request's end), over the measured
requests. ``done.tokens_digest`` hashes the token ids of requests 0 .. ``requests``-1, so any
two platforms can be checked for generating the same tokens, whatever ``min_seconds`` added.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.datasets import CORPUS_FILE, read_text_samples
from isobench.workloads.llm_common import (
    DECODE_S,
    PREFILL_S,
    CausalStep,
    LlmData,
    LlmParams,
    build_language_model,
    build_prompts,
    kv_cache_bytes,
    load_prompt_tokenizer,
)
from isobench.workloads.timing import CLOCK, phase_clock, resolve_device

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

LLM_PHASES = ("tokenize", "prefill", "decode", "detokenize")
#: torch (~2 s here), then transformers' model code (~4 s: it imports torch._dynamo and torchvision)
START_S = 8.0


@dataclass
class GenerationStats:
    """The measured requests' numbers behind the cell's metrics."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    e2e: float = 0.0
    kv_bytes: int = 0

    def add(self, phases: dict[str, float], e2e: float, gaps: list[float], tokens: int, kv_bytes: int) -> None:
        self.ttft.append(phases["tokenize"] + phases["prefill"])
        self.tpot.append(phases["decode"] / len(gaps))
        self.gaps.extend(gaps)
        self.tokens += tokens
        self.e2e += e2e
        self.kv_bytes = kv_bytes

    def report(self, ctx: CellContext) -> None:
        if not self.ttft:
            return
        # TTFT's headline is the median over requests, as serving benchmarks report it: one request of
        # dozens caught by a stray interruption (3-9x the typical 2 ms here) moved a cell's mean by up
        # to 25% and set the study's TTFT floor; the mean and p90 keep the tail in view
        ctx.metric("ttft", statistics.median(self.ttft), "s")
        ctx.metric("ttft_mean", statistics.fmean(self.ttft), "s")
        ctx.metric("ttft_p90", percentile(self.ttft, 0.9), "s")
        ctx.metric("tpot", statistics.fmean(self.tpot), "s")
        ctx.metric("tpot_p90", percentile(self.gaps, 0.9), "s")
        ctx.metric("tokens_per_s", self.tokens / self.e2e, "tokens/s")
        ctx.metric("kv_cache_bytes", self.kv_bytes, "B")


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def token_picker(params: LlmParams, device: Any) -> tuple[Callable[[Any], Any], Callable[[int], None]]:
    """(pick the next token of each row from its logits, reseed for request i). Sampling reseeds a
    generator per request, so request i draws the same tokens on every platform however many
    requests ran before it."""
    import torch

    if not params.sampling:
        return (lambda logits: logits.argmax(dim=-1)), (lambda index: None)
    generator = torch.Generator(device=device)

    def pick(logits: Any) -> Any:
        probabilities = torch.softmax(logits.float() / params.temperature, dim=-1)
        return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)

    return pick, lambda index: generator.manual_seed(1_000_003 * (index + 1))


def serve_requests(ctx: CellContext, params: LlmParams, step: Callable[[Any, Any], tuple[Any, Any]],
                   tokenizer: Any, prompts: list[str], device: Any) -> GenerationStats:
    """Run the requests (``requests``, or on until ``min_seconds``), each item one request;
    ``step(ids, cache) -> (last logits, cache)`` is the model (see CausalStep)."""
    import torch

    clock = phase_clock(CLOCK)
    pick, reseed = token_picker(params, device)
    stats, digest = GenerationStats(), hashlib.sha256()
    batch, index = params.batch_size, 0
    ctx.start_run(rolling=params.min_seconds > 0)
    with torch.inference_mode():
        while index < params.requests or ctx.measured_s() < params.min_seconds:
            texts = [prompts[(index * batch + row) % len(prompts)] for row in range(batch)]
            reseed(index)
            clock.start()
            ids = torch.tensor([e.ids for e in tokenizer.encode_batch(texts)], dtype=torch.long).to(device)
            clock.lap("tokenize")
            logits, cache = step(ids, None)
            token = pick(logits)
            generated = [token.tolist()]  # a server streams each token: it reaches the host every step
            clock.lap("prefill")
            stamps = [time.perf_counter()]
            for _ in range(params.output_tokens - 1):
                logits, cache = step(token[:, None], cache)
                token = pick(logits)
                generated.append(token.tolist())
                stamps.append(time.perf_counter())
            clock.lap("decode")
            sequences = [list(row) for row in zip(*generated, strict=True)]
            tokenizer.decode_batch(sequences)
            clock.lap("detokenize")
            phases, e2e = clock.stop()
            measured = ctx.counts[1]
            ctx.item(phases, e2e)
            if ctx.counts[1] > measured:  # not a warm-up item
                gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:], strict=False)]
                stats.add(phases, e2e, gaps, batch * params.output_tokens, kv_cache_bytes(cache))
            if index < params.requests:
                digest.update(json.dumps(sequences).encode())
            index += 1
    ctx.note(tokens_digest=digest.hexdigest(), digest_requests=min(index, params.requests), requests_run=index,
             timing=CLOCK, device=str(device))
    return stats


@WORKLOADS.register("llm-generate")
class LlmGenerate(LlmData, Workload):
    description = "LLM generation in-process (Llama or GPT-2, random weights, byte-level BPE): TTFT, TPOT, tokens/s"
    item = "request"
    phases = LLM_PHASES
    setup_phases = ("import", "data_load", "model_load")
    Params = LlmParams
    imports = ("torch", "tokenizers")
    headline_metrics = {"ttft": "time", "tpot": "time", "tokens_per_s": "rate"}

    @classmethod
    def estimate_s(cls, params: LlmParams) -> float:  # type: ignore[override]
        per_request = params.batch_size * (params.prompt_tokens * PREFILL_S[params.size]) + \
            params.output_tokens * DECODE_S[params.size] * (1 + 0.1 * (params.batch_size - 1))
        return max(START_S + 1.0 + params.requests * per_request, params.min_seconds)

    def run(self, params: LlmParams, ctx: CellContext) -> None:  # type: ignore[override]
        assert ctx.data_dir is not None, "llm-generate needs its data set"
        device = resolve_device(params.device)
        with ctx.setup("data_load"):
            tokenizer = load_prompt_tokenizer(ctx.data_dir, params.prompt_tokens)
            prompts = build_prompts(tokenizer, read_text_samples(ctx.data_dir / CORPUS_FILE),
                                    params.prompt_tokens, ctx.seed)
        with ctx.setup("model_load"):
            model = build_language_model(params.model, params.size, tokenizer.get_vocab_size(), ctx.seed).to(device)
        ctx.note(parameters=sum(p.numel() for p in model.parameters()),
                 attention=getattr(model.config, "_attn_implementation", None))
        serve_requests(ctx, params, CausalStep(model), tokenizer, prompts, device).report(ctx)
