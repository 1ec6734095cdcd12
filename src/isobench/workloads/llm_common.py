"""What llm-generate needs around its generation loop: parameters and model sizes, the data set
(a generated corpus and a byte-level BPE trained on it), the prompts, and the transformers model.

The model is a decoder-only transformer from transformers' own definitions (Llama or GPT-2),
random weights seeded by the cell's seed. Its vocabulary is the tokenizer's, so the generated
ids decode to text. Nothing is fetched from a hub.
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from isobench.workloads.base import WorkloadParams
from isobench.workloads.datasets import CORPUS_FILE, TOKENIZER_FILE, _corpus_lines, _generate_atomically

END_OF_TEXT = "<|endoftext|>"
#: distinct prompts a cell cycles over (request i, sample j takes prompt (i * batch + j) mod this)
PROMPT_POOL = 64


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    #: key/value heads (Llama's grouped-query attention; GPT-2 has one per head)
    kv_heads: int
    #: the MLP's inner width (Llama's SwiGLU; GPT-2 uses 4 × hidden)
    intermediate: int
    #: the longest sequence, prompt and output together
    positions: int


SIZES: dict[str, Shape] = {
    # about 2 ms a token on one core of the 2-core VM: a cell with its warm-up is a few seconds
    "tiny": Shape(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=352, positions=512),
    "small": Shape(layers=6, hidden=512, heads=8, kv_heads=4, intermediate=1408, positions=1024),
    # GPT-2 small's body (12 layers, 768 wide): tens of ms per token on one core
    "base": Shape(layers=12, hidden=768, heads=12, kv_heads=4, intermediate=2048, positions=2048),
}
#: seconds per generated token and per prompt token at batch 1 on one core of the 2-core VM,
#: measured with Llama at 64 prompt tokens (estimate_s)
DECODE_S = {"tiny": 0.002, "small": 0.018, "base": 0.07}
PREFILL_S = {"tiny": 6e-5, "small": 1.5e-3, "base": 5e-3}


class LlmParams(WorkloadParams):
    model: Literal["llama", "gpt2"] = Field("llama", description="decoder definition (transformers'): Llama "
                                                                 "(RoPE, RMSNorm, SwiGLU, grouped KV) or GPT-2")
    size: Literal["tiny", "small", "base"] = Field("tiny", description="tiny: 2 layers, 128 wide; small: 6 x "
                                                   "512; base: 12 x 768 (GPT-2 small's body)")
    prompt_tokens: int = Field(64, ge=1, le=65536, description="tokens per prompt (the prefill's length)")
    output_tokens: int = Field(32, ge=2, le=65536, description="tokens generated per prompt (first + decode)")
    batch_size: int = Field(1, ge=1, le=4096, description="prompts generated together per request")
    sampling: bool = Field(False, description="sample from the softmax (a fixed seed per request) instead of "
                                              "greedy argmax")
    temperature: float = Field(1.0, gt=0, le=100, description="sampling: logits divided by this")
    requests: int = Field(10, ge=1, le=100_000_000, description="timed requests (cycling over the prompts)")
    min_seconds: float = Field(0.0, ge=0, le=7 * 86400,
                               description="go on until at least this long (whichever is longer)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees one")
    n_samples: int = Field(2000, ge=16, le=10_000_000, description="lines in the generated corpus")
    vocab_size: int = Field(2048, ge=300, le=1_000_000, description="byte-level BPE vocabulary trained on it")

    @model_validator(mode="after")
    def _fits_the_positions(self) -> LlmParams:
        positions = SIZES[self.size].positions
        if self.prompt_tokens + self.output_tokens > positions:
            raise ValueError(f"prompt_tokens + output_tokens = {self.prompt_tokens + self.output_tokens} exceeds "
                             f"the {positions} positions of size {self.size}; fix: shorten the prompt or the "
                             f"output, or pick a larger size")
        return self


def llm_data_key(params: LlmParams) -> str:
    return f"llm-text-n{params.n_samples}-bpe{params.vocab_size}-s0"


def prepare_llm_data(params: LlmParams, target: Path) -> None:
    """corpus.txt (the text workloads' generated paragraphs) and a byte-level BPE trained on it."""

    def fill(tmp: Path) -> None:
        lines = _corpus_lines(params.n_samples, 4, np.random.default_rng(0))
        (tmp / CORPUS_FILE).write_text("\n".join(lines) + "\n")
        train_byte_bpe(tmp / CORPUS_FILE, params.vocab_size, tmp / TOKENIZER_FILE)

    _generate_atomically(target, fill)


class LlmData:
    """What llm-generate and llm-serve share as workloads: the model's modules to import before
    timing, and the generated corpus and tokenizer as their data set."""

    imports: tuple[str, ...] = ("torch", "tokenizers")

    @classmethod
    def import_modules(cls, params: LlmParams) -> tuple[str, ...]:
        return (*cls.imports, f"transformers.models.{params.model}.modeling_{params.model}")

    @classmethod
    def data_key(cls, params: LlmParams) -> str:
        return llm_data_key(params)

    @classmethod
    def prepare_data(cls, params: LlmParams, target: Path) -> None:
        prepare_llm_data(params, target)


def train_byte_bpe(corpus: Path, vocab_size: int, out: Path) -> None:
    """GPT-2's kind of tokenizer: BPE merges over bytes, so any text encodes without an unknown token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([str(corpus)], trainer)
    tokenizer.save(str(out))


def load_prompt_tokenizer(directory: Path, prompt_tokens: int) -> Any:
    """The data set's tokenizer, cutting every prompt to ``prompt_tokens``."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    tokenizer.enable_truncation(max_length=prompt_tokens)
    return tokenizer


def build_prompts(tokenizer: Any, lines: list[str], prompt_tokens: int, seed: int) -> list[str]:
    """PROMPT_POOL texts of exactly ``prompt_tokens`` tokens, runs of corpus lines from places the
    seed picks. Each is cut where its last token ends, so tokenizing it is the whole request's
    work; where re-tokenizing the cut text would not give that length back (a merge across the
    cut), the longer text stays and the tokenizer's truncation cuts it."""
    picker = random.Random(seed)
    prompts = []
    for _ in range(PROMPT_POOL):
        line = picker.randrange(len(lines))
        text = lines[line]
        while len(tokenizer.encode(text).ids) < prompt_tokens:
            line += 1
            text += " " + lines[line % len(lines)]
        cut = text[:tokenizer.encode(text).offsets[prompt_tokens - 1][1]]
        prompts.append(cut if len(tokenizer.encode(cut).ids) == prompt_tokens else text)
    return prompts


def build_language_model(model: str, size: str, vocab: int, seed: int) -> Any:
    """The transformers model with random weights (``seed``), in eval mode."""
    import torch

    shape = SIZES[size]
    torch.manual_seed(seed)
    if model == "gpt2":
        from transformers.models.gpt2.configuration_gpt2 import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=shape.positions, n_embd=shape.hidden,
                                          n_layer=shape.layers, n_head=shape.heads, bos_token_id=0,
                                          eos_token_id=0)).eval()
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                                        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                                        num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.positions,
                                        bos_token_id=0, eos_token_id=0)).eval()


class CausalStep:
    """One forward step of a causal LM: the last position's logits, and the KV cache grown by the
    step's tokens. Transformers 5 names the cache ``cache``; older releases ``past_key_values``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        accepted = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in accepted else "past_key_values"

    def __call__(self, ids: Any, cache: Any) -> tuple[Any, Any]:
        # logits_to_keep=1: only the last position goes through the LM head, as generate() does
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_arg: cache})
        grown = getattr(out, "cache", None)
        return out.logits[:, -1, :], grown if grown is not None else getattr(out, "past_key_values", None)


def kv_cache_bytes(cache: Any) -> int:
    """Bytes the cache's key and value tensors hold (transformers' DynamicCache, layer by layer)."""
    total = 0
    for layer in getattr(cache, "layers", None) or ():
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total
