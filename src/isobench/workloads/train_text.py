"""text-train: a language model trained on a text corpus, timed per minibatch.

``lstm``: an LSTM language model (next-token prediction, Park & Bahn's "large" text model);
``mobilebert``: transformers' MobileBERT trained with masked-language modelling (15 % of
tokens masked, 80/10/10 as BERT does), Park & Bahn's "small" one. Both random-initialised;
``size: tiny`` is a few-layer config that trains in seconds here, ``size: full`` the
published shape. The corpus is tokenized once at ``data_load`` into fixed-length samples;
masking (or the shift for next-token targets) happens in the DataLoader's collate, so it
is part of ``fetch_stall`` with ``workers: 0``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import CORPUS_FILE, load_tokenizer, read_text_samples
from isobench.workloads.text_common import TextDataParams, check_text_data, prepare_text_data, text_data_key
from isobench.workloads.timing import resolve_device
from isobench.workloads.training import (
    TORCH_IMPORT_S,
    TRAIN_PHASES,
    TRAIN_SETUP,
    TrainParams,
    make_loader,
    make_optimizer,
    train_loop,
    train_phases,
)

TRANSFORMERS_IMPORT_S = 3.0
#: rough seconds per token (forward + backward + step) on one core of this box
COST_PER_TOKEN = {("lstm", "tiny"): 2e-5, ("lstm", "full"): 4e-4,
                  ("mobilebert", "tiny"): 4e-5, ("mobilebert", "full"): 3e-3}


class TextTrainParams(TrainParams, TextDataParams):
    model: Literal["lstm", "mobilebert"] = Field("lstm", description="LSTM language model or MobileBERT (MLM)")
    size: Literal["tiny", "full"] = Field("tiny", description="tiny: 2 layers, narrow; full: the published shape")
    mask_prob: float = Field(0.15, gt=0, lt=1, description="mobilebert: share of tokens masked")
    lr: float = Field(0.001, gt=0, le=10, description="learning rate")
    optimizer: Literal["sgd", "adam", "adamw", "rmsprop"] = Field("adam", description="sgd (with momentum), "
                                                                  "adam, adamw or rmsprop")


class ShiftTargets:
    """Collate for next-token prediction: inputs are tokens 0..n-2, targets 1..n-1."""

    def __call__(self, rows: list[Any]) -> tuple[Any, Any]:
        import torch

        ids = torch.stack([row[0] for row in rows])
        return ids[:, :-1], ids[:, 1:]


class MaskTokens:
    """Collate for masked-language modelling, as BERT does it: of the chosen tokens 80 %
    become [MASK], 10 % a random token, 10 % stay; labels are -100 elsewhere."""

    def __init__(self, mask_id: int, vocab_size: int, n_special: int, prob: float) -> None:
        self.mask_id, self.vocab_size, self.n_special, self.prob = mask_id, vocab_size, n_special, prob

    def __call__(self, rows: list[Any]) -> tuple[Any, Any, Any]:
        import torch

        ids = torch.stack([row[0] for row in rows])
        chosen = (torch.rand(ids.shape) < self.prob) & (ids >= self.n_special)
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        inputs = ids.clone()
        roll = torch.rand(ids.shape)
        inputs[chosen & (roll < 0.8)] = self.mask_id
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        inputs[swap] = torch.randint(self.n_special, self.vocab_size, (int(swap.sum()),))
        return inputs, (ids != 0).long(), labels


def tokenized_samples(directory: Path, seq_len: int) -> tuple[Any, Any]:
    """All corpus lines as a (samples, seq_len) int64 tensor, and the tokenizer."""
    import torch

    tokenizer: Any = load_tokenizer(directory, seq_len)
    encodings = tokenizer.encode_batch(read_text_samples(directory / CORPUS_FILE))
    return torch.tensor([e.ids for e in encodings], dtype=torch.long), tokenizer


@WORKLOADS.register("text-train")
class TextTrain(Workload):
    description = "language-model training (LSTM, or MobileBERT with masked LM) over a tokenized text corpus"
    item = "minibatch"
    phases = TRAIN_PHASES
    setup_phases = TRAIN_SETUP
    Params = TextTrainParams
    imports = ("torch", "torch._dynamo", "tokenizers")

    @classmethod
    def import_modules(cls, params: TextTrainParams) -> tuple[str, ...]:  # type: ignore[override]
        extra = ("transformers.models.mobilebert.modeling_mobilebert",) if params.model == "mobilebert" else ()
        return cls.imports + extra

    @classmethod
    def data_key(cls, params: TextTrainParams) -> str:  # type: ignore[override]
        return text_data_key(params)

    @classmethod
    def item_phases(cls, params: TextTrainParams) -> tuple[str, ...]:  # type: ignore[override]
        return train_phases(params)

    @classmethod
    def check_host(cls, params: TextTrainParams) -> None:  # type: ignore[override]
        check_text_data(params)

    @classmethod
    def prepare_data(cls, params: TextTrainParams, target: Path) -> None:  # type: ignore[override]
        prepare_text_data(params, target)

    @classmethod
    def estimate_s(cls, params: TextTrainParams) -> float:  # type: ignore[override]
        steps = params.steps if not params.epochs else params.epochs * max(1, params.n_samples // params.batch_size)
        start = TORCH_IMPORT_S + 1.0 + (TRANSFORMERS_IMPORT_S if params.model == "mobilebert" else 0.0)
        work = steps * params.batch_size * params.seq_len * COST_PER_TOKEN[(params.model, params.size)]
        return max(start + work, params.min_seconds)

    def run(self, params: TextTrainParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads import nets

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "text-train needs its data set"
        with ctx.setup("data_load"):
            ids, tokenizer = tokenized_samples(ctx.data_dir, params.seq_len)
            vocab = tokenizer.get_vocab_size()
            if params.model == "lstm":
                collate: Any = ShiftTargets()
            else:
                mask_id = tokenizer.token_to_id("[MASK]")
                if mask_id is None:
                    raise ValueError("the tokenizer has no [MASK] token, which masked-language modelling needs")
                n_special = 1 + max(tokenizer.token_to_id(t) or 0 for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                            "[MASK]"))
                collate = MaskTokens(mask_id, vocab, n_special, params.mask_prob)
            loader = make_loader(torch.utils.data.TensorDataset(ids), params, ctx.seed, device, collate)
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            if params.model == "lstm":
                embed, hidden, layers = nets.LSTM_SIZES[params.size]
                model = nets.LstmLanguageModel(vocab, embed, hidden, layers)
            else:
                from transformers import MobileBertForMaskedLM

                model = MobileBertForMaskedLM(nets.mobilebert_config(params.size, vocab, params.seq_len))
            model = model.to(device).train()
            optimizer = make_optimizer(params, model.parameters())
            loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0)

        def forward(batch: Any) -> tuple[Any, Any]:
            if params.model == "lstm":
                inputs, targets = batch
                logits = model(inputs)
                return loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits
            inputs, attention, labels = batch
            out = model(input_ids=inputs, attention_mask=attention, labels=labels)
            return out.loss, out.logits

        def read_out(loss: Any, outputs: Any, batch: Any) -> dict[str, float]:
            return {"loss": loss.item()}

        train_loop(ctx, params, loader, device, optimizer, forward, read_out, model)
        ctx.note(vocab_size=vocab)
