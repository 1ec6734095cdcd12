"""speech-infer: end-to-end speech recognition over WAV files, shaped like MLPerf's RNN-T.

Per request: ``preprocess`` (read the WAV file with the standard library, STFT with a Hann
window, power spectrum through a mel filterbank computed here, log, per-feature
normalisation), ``inference`` (an LSTM encoder over stacked frames; ``model: rnnt`` adds
the transducer's prediction and joint networks and runs its greedy search, ``lstm-ctc`` a
per-frame character classifier) and ``postprocess`` (``lstm-ctc``: softmax, best symbol
per frame, repeats collapsed and blanks dropped; both: ids mapped to characters).
Weights are random (seed 0 on every cell), so transcripts are gibberish. The LSTM+CTC work per
request is fixed by the audio's length; a transducer's also by how often its search emits, which
random weights set arbitrarily (reported as ``workload.symbols_per_request``), so ``lstm-ctc``
is the default.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.data_import import check, fingerprint, materialise
from isobench.workloads.datasets import list_wav_folder, read_wav, write_wav_folder
from isobench.workloads.inference import INFER_PHASES, INFER_SETUP, InferParams, infer_loop
from isobench.workloads.timing import resolve_device

TORCH_IMPORT_S = 4.0
#: blank first (CTC and transducer blank = 0), then space, letters and apostrophe (MLPerf RNN-T's labels)
ALPHABET = ("_", " ", *"abcdefghijklmnopqrstuvwxyz", "'")
WINDOW_S, HOP_S = 0.025, 0.010
#: (hidden, layers): tiny trains nothing and runs fast; full is RNN-T's encoder width and depth
SIZES = {"tiny": (128, 2), "full": (1024, 5)}


class SpeechInferParams(InferParams):
    model: Literal["lstm-ctc", "rnnt"] = Field("lstm-ctc", description="LSTM+CTC, or an RNN transducer "
                                                                      "(greedy search)")
    size: Literal["tiny", "full"] = Field("tiny", description="tiny: 2×128 LSTM; full: 5×1024 as RNN-T")
    requests: int = Field(20, ge=1, le=100_000_000, description="timed requests (cycling over the files)")
    n_files: int = Field(16, ge=1, le=10_000_000, description="WAV files in the generated data set")
    seconds: float = Field(2.0, gt=0.1, le=600, description="mean length of the generated utterances")
    n_mels: int = Field(80, ge=8, le=256, description="mel bands of the log-mel features")
    max_symbols: int = Field(3, ge=1, le=100, description="rnnt: most labels emitted per encoder frame")
    top_k: int = Field(1, ge=1, le=1, description="best path only (greedy decoding)")


def hz_to_mel(hz: float) -> float:
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def mel_to_hz(mel: float) -> float:
    return 700.0 * (10 ** (mel / 2595.0) - 1.0)


@cache
def mel_filterbank(n_mels: int, n_fft: int, sample_rate: int) -> Any:
    """(n_mels, n_fft // 2 + 1) triangular filters evenly spaced on the HTK mel scale up to
    Nyquist, each scaled to unit area (Slaney's normalisation)."""
    import torch

    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    top = hz_to_mel(sample_rate / 2)
    edges = torch.tensor([mel_to_hz(top * i / (n_mels + 1)) for i in range(n_mels + 2)], dtype=torch.float64)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs[None] - lower) / (centre - lower)
    falling = (upper - freqs[None]) / (upper - centre)
    bank = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return (bank * (2.0 / (upper - lower))).float()


def log_mel(samples: Any, sample_rate: int, n_mels: int) -> Any:
    """(frames, n_mels) log-mel features of a mono signal, normalised per band."""
    import torch

    signal = torch.from_numpy(samples)
    window = round(WINDOW_S * sample_rate)
    n_fft = 1 << (window - 1).bit_length()
    spectrum = torch.stft(signal, n_fft=n_fft, hop_length=round(HOP_S * sample_rate), win_length=window,
                          window=torch.hann_window(window), center=True, return_complex=True)
    power = spectrum.real.square() + spectrum.imag.square()  # (freqs, frames)
    features = torch.log(mel_filterbank(n_mels, n_fft, sample_rate) @ power + 1e-10).T
    return (features - features.mean(0)) / (features.std(0) + 1e-5)


def ctc_greedy(logits: Any) -> list[list[int]]:
    """Best symbol per frame, repeats collapsed, blanks (0) dropped."""
    import torch

    best = torch.softmax(logits, dim=-1).argmax(-1).tolist()
    out = []
    for row in best:
        symbols, previous = [], 0
        for symbol in row:
            if symbol != previous and symbol != 0:
                symbols.append(symbol)
            previous = symbol
        out.append(symbols)
    return out


@WORKLOADS.register("speech-infer")
class SpeechInfer(Workload):
    description = "E2E speech recognition (RNN-T-like or LSTM+CTC) over log-mel features of WAV files"
    item = "request"
    phases = INFER_PHASES
    setup_phases = INFER_SETUP
    Params = SpeechInferParams
    imports = ("torch",)

    @classmethod
    def data_key(cls, params: SpeechInferParams) -> str:  # type: ignore[override]
        if params.data_path:
            return f"user-wav-{fingerprint(params.data_path)}"
        return f"wav-n{params.n_files}-t{params.seconds:g}-s0"

    @classmethod
    def check_host(cls, params: SpeechInferParams) -> None:  # type: ignore[override]
        if params.data_path:
            check("wav", params.data_path)

    @classmethod
    def prepare_data(cls, params: SpeechInferParams, target: Path) -> None:  # type: ignore[override]
        if params.data_path:
            materialise("wav", params.data_path, target)
        else:
            write_wav_folder(target, params.n_files, params.seconds, seed=0)

    @classmethod
    def estimate_s(cls, params: SpeechInferParams) -> float:  # type: ignore[override]
        frames = params.seconds * 100 * params.batch_size
        per_frame = (2e-4 if params.model == "rnnt" else 5e-5) * (40 if params.size == "full" else 1)
        return max(TORCH_IMPORT_S + 1.0 + params.requests * (0.005 + frames * per_frame), params.min_seconds)

    def run(self, params: SpeechInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads import nets

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "speech-infer needs its data set"
        with ctx.setup("data_load"):
            files = list_wav_folder(ctx.data_dir)
        with ctx.setup("model_load"):
            # A fixed seed, not the repetition's: a transducer's search does as much work as its
            # weights make it emit, so every repetition and platform must get the same weights.
            torch.manual_seed(0)
            hidden, layers = SIZES[params.size]
            model_cls = nets.RnntSpeechModel if params.model == "rnnt" else nets.CtcSpeechModel
            model = model_cls(params.n_mels, hidden, layers, len(ALPHABET)).to(device).eval()

        def preprocess(index: int) -> Any:
            features = []
            for i in range(params.batch_size):
                samples, rate = read_wav(files[(index * params.batch_size + i) % len(files)])
                features.append(log_mel(samples, rate, params.n_mels))
            # Utterances differ in length: pad with zeros (the normalised mean) to the longest.
            padded = torch.nn.utils.rnn.pad_sequence(features, batch_first=True)
            return padded.to(device, non_blocking=True)

        def infer(features: Any) -> Any:
            if params.model == "rnnt":
                return model.greedy_decode(features, params.max_symbols)
            return model(features)

        emitted = {"symbols": 0, "requests": 0}

        def postprocess(output: Any) -> list[str]:
            symbols = output if params.model == "rnnt" else ctc_greedy(output)
            emitted["symbols"] += sum(len(row) for row in symbols)
            emitted["requests"] += 1
            return ["".join(ALPHABET[s] for s in row) for row in symbols]

        infer_loop(ctx, params, device, preprocess, infer, postprocess)
        ctx.metric("symbols_per_request", emitted["symbols"] / max(emitted["requests"], 1), "symbols")
