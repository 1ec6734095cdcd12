"""text-infer: end-to-end text classification with a BERT-style encoder over a text file.

Per request: ``preprocess`` (WordPiece-tokenize ``batch_size`` lines of the file with the
data set's tokenizer, pad to ``seq_len``, build the id and attention tensors),
``inference`` (MobileBERT or BERT for sequence classification, transformers' definitions,
random weights) and ``postprocess`` (softmax, top-k, label mapping through labels.txt).
The file is read into memory at ``data_load``, as MLPerf's BERT harness loads SQuAD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import CORPUS_FILE, load_tokenizer, read_labels, read_text_samples
from isobench.workloads.inference import INFER_PHASES, INFER_SETUP, InferParams, infer_loop, softmax_top_k
from isobench.workloads.text_common import TextDataParams, check_text_data, prepare_text_data, text_data_key
from isobench.workloads.timing import resolve_device

START_S = 9.0  # torch, tokenizers and transformers' model code
COST_PER_TOKEN = {("mobilebert", "tiny"): 2e-5, ("mobilebert", "full"): 1e-3,
                  ("bert", "tiny"): 1e-5, ("bert", "full"): 8e-4}


class TextInferParams(InferParams, TextDataParams):
    model: Literal["mobilebert", "bert"] = Field("mobilebert", description="encoder for sequence classification")
    size: Literal["tiny", "full"] = Field("tiny", description="tiny: 2 layers, narrow; full: the published shape")
    seq_len: int = Field(64, ge=4, le=4096, description="tokens per sample (padded/truncated with [PAD]=0)")
    top_k: int = Field(3, ge=1, le=1000, description="labels returned per request")

    @model_validator(mode="after")
    def _top_k_fits(self) -> TextInferParams:
        self.top_k_within(self.n_classes, "n_classes")
        return self


@WORKLOADS.register("text-infer")
class TextInfer(Workload):
    description = "E2E text classification (MobileBERT or BERT) with real WordPiece tokenization"
    item = "request"
    phases = INFER_PHASES
    setup_phases = INFER_SETUP
    Params = TextInferParams
    imports = ("torch", "tokenizers")
    needs_data = True

    @classmethod
    def import_modules(cls, params: TextInferParams) -> tuple[str, ...]:  # type: ignore[override]
        return (*cls.imports, f"transformers.models.{params.model}.modeling_{params.model}")

    @classmethod
    def data_key(cls, params: TextInferParams) -> str:  # type: ignore[override]
        return text_data_key(params)

    @classmethod
    def check_host(cls, params: TextInferParams) -> None:  # type: ignore[override]
        check_text_data(params)

    @classmethod
    def prepare_data(cls, params: TextInferParams, target: Path) -> None:  # type: ignore[override]
        prepare_text_data(params, target)

    @classmethod
    def estimate_s(cls, params: TextInferParams) -> float:  # type: ignore[override]
        per_request = params.batch_size * params.seq_len * COST_PER_TOKEN[(params.model, params.size)] + 0.001
        return max(START_S + 1.0 + params.requests * per_request, params.min_seconds)

    def run(self, params: TextInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads.nets import build_text_classifier

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "text-infer needs its data set"
        with ctx.setup("data_load"):
            lines = read_text_samples(ctx.data_dir / CORPUS_FILE)
            tokenizer: Any = load_tokenizer(ctx.data_dir, params.seq_len)
            labels = read_labels(ctx.data_dir, params.n_classes, "class")
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = build_text_classifier(params.model, params.size, tokenizer.get_vocab_size(), params.seq_len,
                                          params.n_classes).to(device).eval()

        def preprocess(index: int) -> dict[str, Any]:
            start = index * params.batch_size
            encodings = tokenizer.encode_batch([lines[(start + i) % len(lines)] for i in range(params.batch_size)])
            ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)
            mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)
            return {"input_ids": ids.to(device, non_blocking=True), "attention_mask": mask.to(device, non_blocking=True)}

        infer_loop(ctx, params, device, preprocess, lambda batch: model(**batch).logits,
                   lambda logits: softmax_top_k(logits, labels, params.top_k))
