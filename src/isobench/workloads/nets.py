"""Model definitions, random weights, nothing downloaded. Imports torch: load only inside a cell.

Image models are torchvision's own definitions (``weights=None``), except the ResNets, which
are written out in torchvision's layout (``resnets``) so that a cell need not import torchvision; MobileBERT and the small
BERT are transformers' definitions built from a config. The LSTM language model, the speech
models and DLRM are small modules written here, shaped like their published counterparts.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from isobench.workloads.resnets import SHAPES as RESNETS
from isobench.workloads.resnets import build_resnet

IMAGE_MODELS = ("lenet5", "mobilenet_v3_large", "mobilenet_v3_small", "resnet18", "resnet50",
                "squeezenet1_1", "alexnet")


def build_lenet5(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def image_model_imports(name: str) -> tuple[str, ...]:
    """What building ``name`` imports beyond torch (the workload's timed import phase)."""
    return () if name == "lenet5" or name in RESNETS else ("torch._dynamo", "torchvision")


def build_image_model(name: str, num_classes: int) -> nn.Module:
    if name == "lenet5":
        return build_lenet5(num_classes)
    if name in RESNETS:  # written out: importing torchvision costs ~3 s of CPU per cell
        return build_resnet(name, num_classes)
    import torchvision

    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)


# -- text ------------------------------------------------------------------------------------


class LstmLanguageModel(nn.Module):
    """Embedding, stacked LSTM, tied-size projection to the vocabulary: next-token prediction."""

    def __init__(self, vocab_size: int, embed: int, hidden: int, layers: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed, padding_idx=0)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


#: name -> (embedding, hidden, layers); "full" is the size of Zaremba et al.'s medium model
LSTM_SIZES = {"tiny": (64, 128, 2), "full": (650, 650, 2)}


def mobilebert_config(size: str, vocab_size: int, max_len: int, num_labels: int = 2) -> Any:
    from transformers import MobileBertConfig

    if size in ("full", "large"):  # the published MobileBERT shape (24 layers, 25 M parameters)
        return MobileBertConfig(vocab_size=vocab_size, max_position_embeddings=max(512, max_len),
                                num_labels=num_labels)
    return MobileBertConfig(vocab_size=vocab_size, max_position_embeddings=max(64, max_len),
                            hidden_size=128, embedding_size=64, intra_bottleneck_size=64,
                            true_hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=128, num_feedforward_networks=2, num_labels=num_labels)


def bert_config(size: str, vocab_size: int, max_len: int, num_labels: int) -> Any:
    from transformers import BertConfig

    if size == "full":  # BERT-base
        return BertConfig(vocab_size=vocab_size, max_position_embeddings=max(512, max_len),
                          num_labels=num_labels)
    if size == "large":  # BERT-large, MLPerf's SQuAD model
        return BertConfig(vocab_size=vocab_size, max_position_embeddings=max(512, max_len), hidden_size=1024,
                          num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                          num_labels=num_labels)
    return BertConfig(vocab_size=vocab_size, max_position_embeddings=max(64, max_len), hidden_size=128,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                      num_labels=num_labels)


def build_text_classifier(model: str, size: str, vocab_size: int, max_len: int, num_labels: int,
                          task: str = "classify") -> nn.Module:
    """Sequence classification, or (``task="qa"``) extractive question answering: start and
    end logits per token, SQuAD's head."""
    import transformers

    family = "MobileBert" if model == "mobilebert" else "Bert"
    num_labels = 2 if task == "qa" else num_labels  # the QA head's two outputs: start and end
    head = "ForQuestionAnswering" if task == "qa" else "ForSequenceClassification"
    config = (mobilebert_config(size, vocab_size, max_len, num_labels) if model == "mobilebert"
              else bert_config(size, vocab_size, max_len, num_labels))
    return getattr(transformers, family + head)(config)


# -- speech ----------------------------------------------------------------------------------


class SpeechEncoder(nn.Module):
    """Frame stacking (time reduction) then a stacked LSTM, as in RNN-T's encoder."""

    def __init__(self, n_mels: int, hidden: int, layers: int, stack: int) -> None:
        super().__init__()
        self.stack = stack
        self.lstm = nn.LSTM(n_mels * stack, hidden, num_layers=layers, batch_first=True)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (batch, frames, mels)
        batch, frames, mels = features.shape
        frames -= frames % self.stack
        stacked = features[:, :frames].reshape(batch, frames // self.stack, mels * self.stack)
        out, _ = self.lstm(stacked)
        return out


class CtcSpeechModel(nn.Module):
    """LSTM encoder with a per-frame character classifier (blank = 0), decoded greedily."""

    def __init__(self, n_mels: int, hidden: int, layers: int, n_symbols: int, stack: int = 2) -> None:
        super().__init__()
        self.encoder = SpeechEncoder(n_mels, hidden, layers, stack)
        self.head = nn.Linear(hidden, n_symbols)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(features))


class RnntSpeechModel(nn.Module):
    """A small RNN transducer: encoder, prediction network (embedding + LSTM) and joint network.

    ``greedy_decode`` is the transducer's greedy search (at most ``max_symbols`` labels per
    encoder frame), the decoding MLPerf's RNN-T reference runs. With random weights how often
    it emits (and so how often the prediction network runs) is whatever the weights make it;
    the same seed and input give the same labels, hence the same work, on every platform.
    """

    def __init__(self, n_mels: int, hidden: int, layers: int, n_symbols: int, stack: int = 2,
                 pred_hidden: int = 128, joint: int = 128) -> None:
        super().__init__()
        self.n_symbols = n_symbols
        self.encoder = SpeechEncoder(n_mels, hidden, layers, stack)
        self.embed = nn.Embedding(n_symbols, pred_hidden)
        self.pred = nn.LSTM(pred_hidden, pred_hidden, batch_first=True)
        self.joint_enc = nn.Linear(hidden, joint)
        self.joint_pred = nn.Linear(pred_hidden, joint)
        self.joint_out = nn.Linear(joint, n_symbols)

    def greedy_decode(self, features: torch.Tensor, max_symbols: int = 3) -> list[list[int]]:
        encoded = self.joint_enc(self.encoder(features))  # (batch, frames, joint)
        results: list[list[int]] = []
        for b in range(encoded.shape[0]):
            labels: list[int] = []
            token = torch.zeros(1, 1, dtype=torch.long, device=features.device)  # blank starts
            pred_out, state = self.pred(self.embed(token))
            pred_joint = self.joint_pred(pred_out[:, 0])
            for t in range(encoded.shape[1]):
                for _ in range(max_symbols):
                    logits = self.joint_out(torch.tanh(encoded[b:b + 1, t] + pred_joint))
                    symbol = int(logits.argmax(-1))
                    if symbol == 0:
                        break
                    labels.append(symbol)
                    token.fill_(symbol)
                    pred_out, state = self.pred(self.embed(token), state)
                    pred_joint = self.joint_pred(pred_out[:, 0])
            results.append(labels)
        return results


# -- recommendation --------------------------------------------------------------------------


def _mlp(sizes: list[int], last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Dlrm(nn.Module):
    """DLRM (Naumov et al.): bottom MLP on dense features, one embedding table per categorical
    feature, pairwise dot-product interaction, top MLP to one click logit."""

    def __init__(self, n_dense: int, n_sparse: int, table_size: int, dim: int,
                 bottom: tuple[int, ...] = (64, 32), top: tuple[int, ...] = (64, 32)) -> None:
        super().__init__()
        self.bottom = _mlp([n_dense, *bottom, dim], last_activation=True)
        self.tables = nn.ModuleList(nn.EmbeddingBag(table_size, dim, mode="sum") for _ in range(n_sparse))
        n_vectors = n_sparse + 1
        pairs = n_vectors * (n_vectors - 1) // 2
        self.top = _mlp([dim + pairs, *top, 1], last_activation=False)
        rows, cols = torch.triu_indices(n_vectors, n_vectors, offset=1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        for table in self.tables:  # DLRM's uniform init, scaled by the table size
            nn.init.uniform_(table.weight, -math.sqrt(1 / table_size), math.sqrt(1 / table_size))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        # dense: (batch, n_dense) floats; sparse: (batch, n_sparse) indices, one per feature
        x = self.bottom(dense)
        embedded = [table(sparse[:, i:i + 1]) for i, table in enumerate(self.tables)]
        vectors = torch.stack([x, *embedded], dim=1)  # (batch, n_sparse + 1, dim)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.rows, self.cols]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)
