"""Data sets generated on disk in their real formats, deterministic by seed.

Cells read these files like real data (idx files, JPEG folders), so the data path
(bind mount, overlay, 9p) is part of what a platform is measured on. A generation
lands in a temporary directory first and is renamed into place, so a half-written
data set is never used; an existing target is a finished one and is reused.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

IDX_IMAGES = "train-images-idx3-ubyte"
IDX_LABELS = "train-labels-idx1-ubyte"
IMAGE_MAGIC = 0x00000803
LABEL_MAGIC = 0x00000801
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def _generate_atomically(target: Path, fill: Callable[[Path], None]) -> None:
    if target.is_dir():
        return
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        tmp.rename(target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _digit_images(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """28×28 images with a class-dependent stroke pattern plus noise (learnable, not MNIST)."""
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    yy, xx = np.mgrid[0:28, 0:28]
    images = np.zeros((n, 28, 28), dtype=np.float32)
    for digit in range(10):
        angle = digit * np.pi / 10
        line = np.abs((xx - 14) * np.sin(angle) - (yy - 14) * np.cos(angle)) < 2.0
        ring = np.abs(np.hypot(xx - 14, yy - 14) - (4 + digit)) < 1.5
        images[labels == digit] = np.where(line | (ring if digit % 2 else False), 220.0, 0.0)
    images += rng.normal(0, 30, size=images.shape)
    return np.clip(images, 0, 255).astype(np.uint8), labels


def write_mnist_idx(target: Path, n_train: int, seed: int) -> None:
    def fill(tmp: Path) -> None:
        images, labels = _digit_images(n_train, np.random.default_rng(seed))
        with (tmp / IDX_IMAGES).open("wb") as fh:
            fh.write(struct.pack(">IIII", IMAGE_MAGIC, n_train, 28, 28))
            fh.write(images.tobytes())
        with (tmp / IDX_LABELS).open("wb") as fh:
            fh.write(struct.pack(">II", LABEL_MAGIC, n_train))
            fh.write(labels.tobytes())

    _generate_atomically(target, fill)


def _find_idx(directory: Path, name: str, gz: bool = False) -> Path:
    for folder in (directory, directory / "MNIST" / "raw", directory / "raw"):
        for candidate in (folder / name, folder / f"{name}.gz") if gz else (folder / name,):
            if candidate.is_file():
                return candidate
    raise ValueError(f"{directory}: no {name} (expected MNIST idx files there or under MNIST/raw/)")


def read_mnist_idx(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read idx images and labels, checking magic numbers and sizes."""
    image_path, label_path = _find_idx(directory, IDX_IMAGES), _find_idx(directory, IDX_LABELS)
    image_bytes, label_bytes = image_path.read_bytes(), label_path.read_bytes()
    if len(image_bytes) < 16 or len(label_bytes) < 8:
        raise ValueError(f"{image_path.parent}: idx files are truncated")
    magic, count, rows, cols = struct.unpack(">IIII", image_bytes[:16])
    if magic != IMAGE_MAGIC:
        raise ValueError(f"{image_path}: bad magic 0x{magic:08x}, expected 0x{IMAGE_MAGIC:08x}")
    label_magic, label_count = struct.unpack(">II", label_bytes[:8])
    if label_magic != LABEL_MAGIC:
        raise ValueError(f"{label_path}: bad magic 0x{label_magic:08x}, expected 0x{LABEL_MAGIC:08x}")
    if label_count != count or len(image_bytes) != 16 + count * rows * cols or len(label_bytes) != 8 + count:
        raise ValueError(f"{image_path.parent}: idx sizes disagree with their headers")
    images = np.frombuffer(image_bytes, dtype=np.uint8, offset=16).reshape(count, rows, cols)
    labels = np.frombuffer(label_bytes, dtype=np.uint8, offset=8)
    return images, labels


def jpeg_folder_key(n_images: int, size: int, n_classes: int, seed: int = 0) -> str:
    """The data key of the folder ``write_jpeg_folder`` makes with these arguments: every
    workload reading the same generated files shares the one copy."""
    return f"jpeg-n{n_images}-px{size}-c{n_classes}-s{seed}"


def write_jpeg_folder(target: Path, n_images: int, size: int, n_classes: int, seed: int) -> None:
    """ImageNet-style class folders of real JPEG files, plus labels.txt."""
    from PIL import Image

    def fill(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        names = [f"class_{c:03d}" for c in range(n_classes)]
        (tmp / "labels.txt").write_text("\n".join(names) + "\n")
        for name in names:
            (tmp / name).mkdir()
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        for index in range(n_images):
            label = index % n_classes
            # Smooth gradients and a disc: compresses like a photo, not like noise.
            base = rng.uniform(0, 255, size=3)
            slope = rng.uniform(-120, 120, size=(3, 2))
            pixels = base + slope[:, 0, None, None].T * xx[..., None] + slope[:, 1, None, None].T * yy[..., None]
            cx, cy, radius = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.1, 0.3)
            pixels[np.hypot(xx - cx, yy - cy) < radius] = rng.uniform(0, 255, size=3)
            pixels += rng.normal(0, 6, size=pixels.shape)
            image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
            image.save(tmp / names[label] / f"img_{index:05d}.jpg", quality=90)

    _generate_atomically(target, fill)


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()


def list_jpeg_folder(directory: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """(file, class index) pairs sorted by path, and the class names (an ImageFolder tree:
    JPEG, PNG, BMP or WebP files in one folder per class)."""
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory of class folders")
    labels_file = directory / "labels.txt"
    classes = (labels_file.read_text().split() if labels_file.exists()
               else sorted(p.name for p in directory.iterdir() if p.is_dir()))
    files = [(path, index) for index, name in enumerate(classes) if (directory / name).is_dir()
             for path in sorted((directory / name).iterdir()) if _is_image(path)]
    if not files:
        raise ValueError(f"{directory}: no image files in its class folders")
    return files, classes


# -- text: a Wikipedia-style corpus and its WordPiece vocabulary -------------------------------

CORPUS_FILE = "corpus.txt"
TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # [PAD] is id 0: padding is zeros
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch", "br")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou")
_CODAS = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st")


def _synthetic_words(n: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        syllables = rng.integers(1, 4)
        words.add("".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                          + _CODAS[rng.integers(len(_CODAS))] for _ in range(syllables)))
    return sorted(words)


def _corpus_lines(n_samples: int, n_topics: int, rng: np.random.Generator) -> list[str]:
    words = _synthetic_words(2000, rng)
    ranks = np.arange(1, len(words) + 1)
    common = 1.0 / ranks ** 1.1
    common /= common.sum()
    topic_words = [rng.choice(len(words), size=40, replace=False) for _ in range(n_topics)]
    lines = []
    for index in range(n_samples):
        length = int(rng.integers(3, 61))
        picks = rng.choice(len(words), size=length, p=common)
        own = rng.random(length) < 0.25
        picks[own] = rng.choice(topic_words[index % n_topics], size=int(own.sum()))
        sentence = [words[i] for i in picks]
        sentence[0] = sentence[0].capitalize()
        for cut in range(8, length - 1, 9):  # sentence breaks
            sentence[cut] += "."
            sentence[cut + 1] = sentence[cut + 1].capitalize()
        if length > 4:
            sentence[length // 2] += ","
        lines.append(" ".join(sentence) + ".")
    return lines


def write_text_corpus(target: Path, n_samples: int, n_topics: int, vocab_size: int, seed: int,
                      corpus: Path | None = None, tokenizer: Path | None = None) -> None:
    """A text data set: ``corpus.txt``, one sample per line (generated: article paragraphs of
    3–60 words drawn Zipf-like from a shared vocabulary plus topic words, so samples need
    padding; or the user's file), ``labels.txt`` naming the topics, and ``tokenizer.json``:
    a WordPiece vocabulary trained on the corpus, or the user's tokenizer.json / vocab.txt."""

    def fill(tmp: Path) -> None:
        if corpus is None:
            lines = _corpus_lines(n_samples, n_topics, np.random.default_rng(seed))
            (tmp / CORPUS_FILE).write_text("\n".join(lines) + "\n")
            (tmp / "labels.txt").write_text("\n".join(f"topic_{t:02d}" for t in range(n_topics)) + "\n")
        else:
            link_or_copy(corpus, tmp / CORPUS_FILE)
        if tokenizer is None:
            train_wordpiece([tmp / CORPUS_FILE], vocab_size, tmp / TOKENIZER_FILE)
        elif tokenizer.suffix == ".json":
            shutil.copy(tokenizer, tmp / TOKENIZER_FILE)
        else:
            tokenizer_from_vocab(tokenizer, tmp / TOKENIZER_FILE)

    _generate_atomically(target, fill)


def link_or_copy(source: Path, dest: Path) -> None:
    """A hard link (no copy, no space) where possible, a copy across filesystems."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def load_tokenizer(directory: Path, seq_len: int, pairs: bool = False) -> object:
    """The data set's tokenizer, emitting ``[CLS] … [SEP]`` (when it knows them), truncated
    and padded with [PAD] to ``seq_len``; with ``pairs``, for (question, passage) pairs."""
    from tokenizers import Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if tokenizer.post_processor is None and cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    # Pairs (question, passage) lose tokens from the passage, never from the question.
    tokenizer.enable_truncation(max_length=seq_len, strategy="only_second" if pairs else "longest_first")
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(length=seq_len, pad_id=pad_id or 0, pad_token="[PAD]")
    return tokenizer


def _bert_pipeline(tokenizer: object) -> None:
    from tokenizers import decoders, normalizers, pre_tokenizers

    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)  # type: ignore[attr-defined]
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # type: ignore[attr-defined]
    tokenizer.decoder = decoders.WordPiece()  # type: ignore[attr-defined]


def train_wordpiece(files: list[Path], vocab_size: int, out: Path) -> None:
    """Train a BERT-style WordPiece vocabulary (lower-cased, [PAD] = 0) and save tokenizer.json."""
    from tokenizers import Tokenizer, models, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    _bert_pipeline(tokenizer)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                        min_frequency=1, show_progress=False)
    tokenizer.train([str(f) for f in files], trainer)
    tokenizer.save(str(out))


def tokenizer_from_vocab(vocab: Path, out: Path) -> None:
    """A BERT ``vocab.txt`` (one token per line, as published with BERT models) as tokenizer.json."""
    from tokenizers import Tokenizer, models

    tokens = vocab.read_text(encoding="utf-8").split("\n")
    if "[UNK]" not in tokens:
        raise ValueError(f"{vocab}: no [UNK] token in this vocabulary")
    tokenizer = Tokenizer(models.WordPiece.from_file(str(vocab), unk_token="[UNK]"))
    _bert_pipeline(tokenizer)
    tokenizer.save(str(out))


def read_text_samples(path: Path) -> list[str]:
    """The non-empty lines of a UTF-8 text file."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    samples = [line for line in lines if line]
    if not samples:
        raise ValueError(f"{path}: no non-empty lines")
    return samples


def read_labels(directory: Path, count: int, prefix: str) -> list[str]:
    """Class names from labels.txt when the data set has one, else ``prefix_<i>``."""
    path = directory / "labels.txt"
    names = path.read_text().split() if path.is_file() else []
    return names[:count] + [f"{prefix}_{i}" for i in range(len(names), count)]


# -- speech: WAV files -----------------------------------------------------------------------

SAMPLE_RATE = 16_000


def write_wav_folder(target: Path, n_files: int, seconds: float, seed: int, sample_rate: int = SAMPLE_RATE) -> None:
    """16-bit mono PCM WAV files of speech-like sound: voiced segments (a glottal pitch with
    harmonics under moving formant peaks) separated by noise bursts and pauses."""
    import wave

    def fill(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        for index in range(n_files):
            n = int(seconds * sample_rate * rng.uniform(0.8, 1.2))
            signal = np.zeros(n, dtype=np.float64)
            start = 0
            while start < n:
                length = int(rng.uniform(0.05, 0.25) * sample_rate)
                t = np.arange(min(length, n - start)) / sample_rate
                kind = rng.random()
                if kind < 0.6:  # voiced
                    f0 = rng.uniform(90, 240)
                    formants = rng.uniform([300, 900, 2200], [900, 2200, 3200])
                    harmonics = np.arange(1, int(3800 // f0) + 1) * f0
                    gains = sum(np.exp(-((harmonics - f) / 150.0) ** 2) for f in formants) + 0.05
                    segment = (gains[:, None] * np.sin(2 * np.pi * harmonics[:, None] * t
                                                       + rng.uniform(0, 2 * np.pi, len(harmonics))[:, None])).sum(0)
                elif kind < 0.8:  # fricative-like noise
                    segment = rng.normal(0, 0.6, len(t))
                else:  # pause
                    segment = np.zeros(len(t))
                envelope = np.sin(np.pi * np.arange(len(t)) / max(len(t) - 1, 1))
                signal[start:start + len(t)] = segment * envelope
                start += len(t)
            signal += rng.normal(0, 0.01, n)
            pcm = np.clip(signal / (np.abs(signal).max() + 1e-9) * 0.7 * 32767, -32768, 32767).astype("<i2")
            with wave.open(str(tmp / f"utt_{index:05d}.wav"), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(sample_rate)
                out.writeframes(pcm.tobytes())

    _generate_atomically(target, fill)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Samples in [-1, 1] (channels averaged) and the sample rate; 8/16/32-bit PCM."""
    import wave

    try:
        with wave.open(str(path), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            raw = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as err:
        raise ValueError(f"{path}: not a PCM WAV file ({err})") from None
    if width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128) / 128
    elif width in (2, 4):
        samples = np.frombuffer(raw, dtype=f"<i{width}").astype(np.float32) / float(1 << (8 * width - 1))
    else:
        raise ValueError(f"{path}: {8 * width}-bit samples are not supported (use 8, 16 or 32-bit PCM)")
    return samples.reshape(-1, channels).mean(axis=1), rate


def list_wav_folder(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.suffix.lower() == ".wav" and p.is_file())
    if not files:
        raise ValueError(f"{directory}: no .wav files")
    return files


# -- recommendation: a Criteo-style CSV --------------------------------------------------------

RECSYS_FILE = "data.csv"


def write_recsys_csv(target: Path, n_rows: int, n_dense: int, n_sparse: int, seed: int) -> None:
    """``data.csv``: a header ``label,I1..In,C1..Cm`` then one impression per row, as in
    Criteo's click logs: integer counts (some missing) and 8-hex-digit categorical hashes
    drawn Zipf-like from per-column vocabularies; the label depends on a few features."""

    def fill(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        dense = np.floor(rng.lognormal(1.0, 1.5, size=(n_rows, n_dense))).astype(np.int64)
        missing = rng.random((n_rows, n_dense)) < 0.1
        cardinalities = np.minimum(10 ** rng.uniform(1, 5, size=n_sparse), 100_000).astype(int)
        sparse = np.empty((n_rows, n_sparse), dtype=object)
        weights = np.zeros(n_sparse)
        for column, cardinality in enumerate(cardinalities):
            vocabulary = rng.integers(0, 1 << 32, size=cardinality)
            ranks = np.minimum(rng.zipf(1.3, size=n_rows), cardinality) - 1
            sparse[:, column] = [f"{v:08x}" for v in vocabulary[ranks]]
            weights[column] = rng.normal()
        score = 0.3 * np.log1p(dense[:, 0]) - 1.5 + rng.normal(0, 0.5, n_rows)
        labels = (rng.random(n_rows) < 1 / (1 + np.exp(-score))).astype(int)
        header = ["label", *(f"I{i + 1}" for i in range(n_dense)), *(f"C{i + 1}" for i in range(n_sparse))]
        lines = [",".join(header)]
        for row in range(n_rows):
            values = ["" if missing[row, i] else str(dense[row, i]) for i in range(n_dense)]
            lines.append(",".join([str(labels[row]), *values, *sparse[row]]))
        (tmp / RECSYS_FILE).write_text("\n".join(lines) + "\n")

    _generate_atomically(target, fill)


def recsys_columns(header: list[str]) -> tuple[list[int], list[int]]:
    """Positions of the dense (``I<n>``) and categorical (``C<n>``) columns of a header."""
    dense = [i for i, name in enumerate(header) if name[:1] == "I" and name[1:].isdigit()]
    sparse = [i for i, name in enumerate(header) if name[:1] == "C" and name[1:].isdigit()]
    if not dense or not sparse:
        raise ValueError(f"CSV header {','.join(header[:6])}...: needs dense columns I1.. and categorical C1.. "
                         "(or Criteo's header-less tab-separated label, 13 counts, 26 hashes)")
    return dense, sparse


CRITEO_COLUMNS = 1 + 13 + 26


def recsys_layout(first_line: str) -> tuple[str, list[int], list[int], bool]:
    """(delimiter, dense columns, categorical columns, whether the first line is a header) of a
    CSV with an ``I1..,C1..`` header, or of Criteo's own header-less TSV (as in its Kaggle
    and Terabyte releases: label, 13 integer features, 26 hexadecimal hashes)."""
    delimiter = "\t" if "\t" in first_line else ","
    fields = first_line.rstrip("\r\n").split(delimiter)
    if delimiter == "\t" and len(fields) == CRITEO_COLUMNS and fields[0] in ("0", "1"):
        return delimiter, list(range(1, 14)), list(range(14, CRITEO_COLUMNS)), False
    dense, sparse = recsys_columns(fields)
    return delimiter, dense, sparse, True
