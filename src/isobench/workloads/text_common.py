"""What the text workloads share: the corpus (generated or a file), its tokenizer, padding.

Samples are tokenized with a real WordPiece tokenizer (the `tokenizers` library): one
trained on the corpus when the data set is prepared (on the host, cached with it), or the
user's ``tokenizer_path``. Every sample is truncated or padded with [PAD] = 0 to
``seq_len``: fixed-length samples with trailing zeros, as Park & Bahn prepared theirs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from isobench.workloads.base import WorkloadParams
from isobench.workloads.data_import import check, check_tokenizer, fingerprint
from isobench.workloads.datasets import write_text_corpus


class TextDataParams(WorkloadParams):
    seq_len: int = Field(32, ge=4, le=4096, description="tokens per sample (padded/truncated with [PAD]=0)")
    n_samples: int = Field(512, ge=1, le=100_000_000, description="lines in the generated corpus")
    n_classes: int = Field(4, ge=2, le=10_000, description="topics of the generated corpus (classifier outputs)")
    vocab_size: int = Field(2000, ge=50, le=1_000_000, description="WordPiece vocabulary trained on the corpus")
    tokenizer_path: str | None = Field(None, description="tokenizer.json or vocab.txt to use instead of training one")
    data_path: str | None = Field(None, description="a text file (one sample per line) instead of the generated corpus")


def text_data_key(params: Any) -> str:
    corpus = f"user-text-{fingerprint(params.data_path)}" if params.data_path else \
        f"text-n{params.n_samples}-c{params.n_classes}-s0"
    tokenizer = f"tok{fingerprint(params.tokenizer_path)}" if params.tokenizer_path else f"v{params.vocab_size}"
    return f"{corpus}-{tokenizer}"


def check_text_data(params: Any) -> None:
    if params.data_path:
        check("text", params.data_path)
    if params.tokenizer_path:
        check_tokenizer(params.tokenizer_path)


def prepare_text_data(params: Any, target: Path) -> None:
    write_text_corpus(target, params.n_samples, params.n_classes, params.vocab_size, seed=0,
                      corpus=Path(params.data_path).expanduser().resolve() if params.data_path else None,
                      tokenizer=Path(params.tokenizer_path).expanduser().resolve() if params.tokenizer_path else None)
