"""text-infer: end-to-end text classification or question answering with a BERT-style encoder.

Per request: ``preprocess`` (WordPiece-tokenize ``batch_size`` lines of the file with the
data set's tokenizer, pad to ``seq_len``, build the id and attention tensors),
``inference`` (MobileBERT or BERT, transformers' definitions, random weights) and
``postprocess``. ``task: classify``: sequence classification, then softmax, top-k and label
mapping through labels.txt. ``task: qa``: SQuAD-style extractive question answering, as
MLPerf's BERT runs it: each line is the passage, paired with a question built from its own
words; the model gives start and end logits per token, and postprocess takes softmax over
both, the best span (end after start, at most ``max_answer`` tokens, inside the passage) and
maps it back to the passage's characters through the tokenizer's offsets. The file is read
into memory at ``data_load``, as MLPerf's BERT harness loads SQuAD.
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
    model: Literal["mobilebert", "bert"] = Field("mobilebert", description="the encoder")
    task: Literal["classify", "qa"] = Field("classify", description="sequence classification, or extractive "
                                                                     "question answering (SQuAD-style)")
    size: Literal["tiny", "full", "large"] = Field("tiny", description="tiny: 2 layers, narrow; full: "
                                                   "MobileBERT / BERT-base; large: BERT-large")
    max_answer: int = Field(30, ge=1, le=512, description="qa: longest answer span, in tokens")
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
        qa = params.task == "qa"
        with ctx.setup("data_load"):
            lines = read_text_samples(ctx.data_dir / CORPUS_FILE)
            tokenizer: Any = load_tokenizer(ctx.data_dir, params.seq_len, pairs=qa)
            labels = read_labels(ctx.data_dir, params.n_classes, "class")
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = build_text_classifier(params.model, params.size, tokenizer.get_vocab_size(), params.seq_len,
                                          params.n_classes, params.task).to(device).eval()

        def preprocess(index: int) -> tuple[dict[str, Any], list[Any], list[str]]:
            start = index * params.batch_size
            texts = [lines[(start + i) % len(lines)] for i in range(params.batch_size)]
            encodings = tokenizer.encode_batch([(question(t), t) for t in texts] if qa else texts)
            tensors = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings]}
            if qa:
                tensors["token_type_ids"] = [e.type_ids for e in encodings]
            inputs = {k: torch.tensor(v, dtype=torch.long).to(device, non_blocking=True) for k, v in tensors.items()}
            return inputs, encodings, texts

        def infer(batch: tuple[dict[str, Any], list[Any], list[str]]) -> tuple[Any, list[Any], list[str]]:
            inputs, encodings, texts = batch
            return model(**inputs), encodings, texts

        def postprocess(result: tuple[Any, list[Any], list[str]]) -> list[Any]:
            output, encodings, texts = result
            if not qa:
                return softmax_top_k(output.logits, labels, params.top_k)
            return best_spans(output.start_logits, output.end_logits, encodings, texts, params.max_answer)

        infer_loop(ctx, params, device, preprocess, infer, postprocess)


def question(passage: str) -> str:
    """A question made of the passage's own words, so the answer is in it (as in SQuAD)."""
    words = passage.split()
    return "which " + " ".join(words[1:4] if len(words) > 3 else words) + "?"


def best_spans(start_logits: Any, end_logits: Any, encodings: list[Any], texts: list[str],
               max_answer: int) -> list[tuple[str, float]]:
    """Per sample, the most probable passage span (end ≥ start, at most ``max_answer``
    tokens) as passage text, with its probability."""
    import torch

    answers = []
    for row, encoding in enumerate(encodings):
        in_passage = torch.tensor([t == 1 and s is not None for t, s in
                                   zip(encoding.type_ids, encoding.sequence_ids, strict=True)])
        start = torch.softmax(start_logits[row].float(), -1).cpu()
        end = torch.softmax(end_logits[row].float(), -1).cpu()
        scores = start[:, None] * end[None, :]
        n = scores.shape[0]
        allowed = torch.ones(n, n, dtype=torch.bool).triu().tril(max_answer - 1)
        allowed &= in_passage[:, None] & in_passage[None, :]
        scores = torch.where(allowed, scores, torch.zeros(()))
        best = int(scores.argmax())
        first, last = divmod(best, n)
        characters = encoding.offsets[first][0], encoding.offsets[last][1]
        answers.append((texts[row][characters[0]:characters[1]], float(scores[first, last])))
    return answers
