"""The training and inference catalogue: every workload runs on bare metal and in Docker at a
tiny size and yields the phases it promises; the data sets are real formats; the tokenizer is
really trained; a wrong data_path is a one-line error before any cell starts."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from isobench.errors import UserError
from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.setup import prepare_data
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from isobench.workloads.datasets import (
    CORPUS_FILE,
    RECSYS_FILE,
    SPECIAL_TOKENS,
    list_wav_folder,
    load_tokenizer,
    read_text_samples,
    read_wav,
    recsys_columns,
    tokenizer_from_vocab,
    write_jpeg_folder,
    write_mnist_idx,
    write_recsys_csv,
    write_text_corpus,
    write_wav_folder,
)
from tests.conftest import need_docker, need_root, run_cli

#: per workload, a tiny cell that still takes the interesting code paths
TINY: dict[str, dict[str, Any]] = {
    # DataLoader worker processes, adam, a batch-norm model, JPEG decoding in the loader
    "image-train": {"model": "squeezenet1_1", "steps": 3, "batch_size": 4, "image_size": 32, "n_train": 16,
                    "source_size": 40, "workers": 1, "optimizer": "adam", "log_every": 2},
    # whole epochs (16 samples / 4 = 4 steps each), masked LM, synchronised timing asked on the CPU
    "text-train": {"model": "mobilebert", "epochs": 1, "batch_size": 4, "n_samples": 16, "seq_len": 16,
                   "vocab_size": 200, "sync_timing": True, "log_every": 2},
    "image-infer": {"model": "mobilenet_v3_small", "requests": 3, "batch_size": 2, "image_size": 32,
                    "n_images": 6, "source_size": 40, "top_k": 3, "preload": True},
    "text-infer": {"model": "bert", "task": "qa", "requests": 3, "n_samples": 16, "seq_len": 24,
                   "vocab_size": 200},
    "speech-infer": {"model": "rnnt", "requests": 2, "n_files": 2, "seconds": 0.5, "n_mels": 40,
                     "max_symbols": 2},
    # a minimum duration: requests go on past the count until 0.3 s have passed
    "dlrm-infer": {"requests": 2, "min_seconds": 0.3, "batch_size": 8, "n_rows": 64, "n_sparse": 4,
                   "table_size": 100},
}
#: the tiniest cell of each, for the container
TINIEST: dict[str, dict[str, Any]] = {
    "image-train": {"model": "lenet5", "steps": 2, "batch_size": 4, "n_train": 16},
    "text-train": {"model": "lstm", "steps": 2, "batch_size": 4, "n_samples": 16, "seq_len": 8, "vocab_size": 200},
    "image-infer": {"model": "lenet5", "requests": 2, "n_images": 4, "source_size": 32, "top_k": 2},
    "text-infer": {"requests": 2, "n_samples": 16, "seq_len": 8, "vocab_size": 200},
    "speech-infer": {"model": "lstm-ctc", "requests": 2, "n_files": 2, "seconds": 0.3, "n_mels": 20},
    "dlrm-infer": {"requests": 2, "batch_size": 4, "top_k": 2, "n_rows": 16, "n_sparse": 2, "table_size": 50},
}
TRAINING = ("fetch_stall", "forward", "backward", "optimizer", "logging")
INFERENCE = ("preprocess", "inference", "postprocess")


def _run(name: str, params: dict[str, Any], platform: str) -> Any:
    study = {"name": "cat", "workloads": [{"name": name, "params": params}], "platforms": [{"name": platform}],
             "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0, "probes": {}}
    cell = expand(load_study_text(json.dumps(study), "cat.yaml"))[0]
    cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])
    platform_obj = platform_for(cell)
    platform_obj.prepare()
    outcome = run_cell(cell, platform_obj)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    return outcome


def _check_phases(name: str, outcome: Any) -> None:
    workload = WORKLOADS.get(name)
    assert workload.phases == (TRAINING if workload.item == "minibatch" else INFERENCE)
    assert set(workload.setup_phases) <= set(outcome.setup)
    assert outcome.items and outcome.done["items"] == len(outcome.items)
    for item in outcome.items:
        assert tuple(item["phases"]) == workload.phases
        assert all(v >= 0 for v in item["phases"].values())
        # Training: logging is the rest of the minibatch; inference: the three phases are the request.
        assert sum(item["phases"].values()) == pytest.approx(item["e2e"], rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("name", sorted(TINY))
def test_workload_on_bare_metal(name: str) -> None:
    need_root()
    outcome = _run(name, TINY[name], "baremetal")
    _check_phases(name, outcome)
    done = outcome.done
    assert done["device"] == "cpu" and done["torch_threads"] == 1
    assert done["timing"] == ("cpu-sync-noop" if TINY[name].get("sync_timing") else "clock")
    if name == "text-train":  # one whole epoch of 16 samples in minibatches of 4
        assert len(outcome.items) == 4 == done["steps_per_epoch"]
        assert done["metrics"]["epochs"] == [1.0, "epochs"] and done["vocab_size"] > len(SPECIAL_TOKENS)
    elif name == "image-train":
        assert len(outcome.items) == 3 and math.isfinite(done["final_loss"])
        assert done["metrics"]["epochs"] == [0.75, "epochs"]
    elif name == "dlrm-infer":  # the minimum duration outlasts the 2 requests asked for
        assert len(outcome.items) > 2 and done["run_s"] >= 0.3
    else:
        if name == "speech-infer":  # the transducer's search emits at most max_symbols per encoder frame
            assert 0 <= done["metrics"]["symbols_per_request"][0] <= 2 * 0.6 * 100 / 2
        assert len(outcome.items) == TINY[name]["requests"]
        assert done["answers"] == TINY[name]["requests"] * TINY[name].get("batch_size", 1)


@pytest.mark.parametrize("name", sorted(TINIEST))
def test_workload_in_docker(name: str) -> None:
    need_docker()
    outcome = _run(name, TINIEST[name], "docker")
    _check_phases(name, outcome)
    assert outcome.done["torch_threads"] == 1


def test_phase_clock_partitions_the_item_and_names_the_mode() -> None:
    from isobench.workloads.timing import CLOCK, CPU_SYNC_NOOP, CUDA_EVENTS, phase_clock, timing_mode

    assert timing_mode(False, "cuda") == CLOCK and timing_mode(True, "cpu") == CPU_SYNC_NOOP
    assert timing_mode(True, "cuda") == CUDA_EVENTS
    clock = phase_clock(CLOCK)
    for _ in range(2):  # reusable: start() forgets the previous item
        clock.start()
        for name in TRAINING:
            sum(range(1000))
            clock.lap(name)
        phases, e2e = clock.stop()
        assert tuple(phases) == TRAINING and all(v >= 0 for v in phases.values())
        assert sum(phases.values()) == pytest.approx(e2e, rel=1e-9) and e2e > 0


def test_every_model_builds_and_takes_a_step() -> None:
    """The models the cells above leave out, one training step or forward pass each."""
    import torch

    from isobench.workloads import nets
    from isobench.workloads.train_image import MIN_SIZE

    torch.set_num_threads(1)
    for model_name in nets.IMAGE_MODELS:
        model = nets.build_image_model(model_name, 5).train()
        size = 28 if model_name == "lenet5" else max(32, MIN_SIZE.get(model_name, 0))
        out = model(torch.randn(2, 1 if model_name == "lenet5" else 3, size, size))
        out.sum().backward()
        assert out.shape == (2, 5), model_name
    lstm = nets.LstmLanguageModel(50, 8, 16, 2)
    assert lstm(torch.randint(0, 50, (2, 7))).shape == (2, 7, 50)
    for kind in ("mobilebert", "bert"):
        classifier = nets.build_text_classifier(kind, "tiny", 60, 16, 3).eval()
        assert classifier(input_ids=torch.randint(0, 60, (2, 16))).logits.shape == (2, 3)
    features = torch.randn(1, 30, 20)
    assert nets.CtcSpeechModel(20, 16, 1, 29)(features).shape == (1, 15, 29)  # frames stacked by 2
    rnnt = nets.RnntSpeechModel(20, 16, 1, 29, pred_hidden=8, joint=8).eval()
    with torch.no_grad():
        decoded = rnnt.greedy_decode(features, max_symbols=2)
    assert len(decoded) == 1 and len(decoded[0]) <= 15 * 2 and all(0 < s < 29 for s in decoded[0])
    dlrm = nets.Dlrm(3, 4, 10, 8)
    assert dlrm(torch.rand(5, 3), torch.randint(0, 10, (5, 4))).shape == (5,)


def test_tokenizer_is_trained_on_the_corpus(tmp_path: Path) -> None:
    write_text_corpus(tmp_path / "t", 200, 3, 400, seed=1)
    lines = read_text_samples(tmp_path / "t" / CORPUS_FILE)
    assert len(lines) == 200 and len({len(line.split()) for line in lines}) > 10  # lengths vary: padding matters
    tokenizer: Any = load_tokenizer(tmp_path / "t", 24)
    vocab = tokenizer.get_vocab()
    assert len(SPECIAL_TOKENS) + 26 < len(vocab) <= 400
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]  # [PAD] = 0: padding is trailing zeros
    # The corpus's frequent words are whole entries of the vocabulary, not [UNK]
    words = [w.strip(".,").lower() for line in lines for w in line.split()]
    common = max(set(words), key=words.count)
    assert common in vocab and tokenizer.encode(common).ids[1] == vocab[common]
    encoding = tokenizer.encode(lines[0])
    assert len(encoding.ids) == 24 and encoding.ids[0] == vocab["[CLS]"] and vocab["[UNK]"] not in encoding.ids
    short = tokenizer.encode("a")
    assert short.ids[-1] == 0 and short.attention_mask[-1] == 0
    # The same vocabulary given as a BERT vocab.txt tokenizes the same way
    ordered = sorted(vocab, key=vocab.get)
    (tmp_path / "vocab.txt").write_text("\n".join(ordered) + "\n")
    write_text_corpus(tmp_path / "v", 0, 1, 0, seed=0, corpus=tmp_path / "t" / CORPUS_FILE,
                      tokenizer=tmp_path / "vocab.txt")
    again: Any = load_tokenizer(tmp_path / "v", 24)
    assert again.encode(lines[3]).ids == tokenizer.encode(lines[3]).ids
    with pytest.raises(ValueError, match=r"\[UNK\]"):
        (tmp_path / "bad.txt").write_text("hello\nworld\n")
        tokenizer_from_vocab(tmp_path / "bad.txt", tmp_path / "x.json")


def test_question_answering_maps_the_best_span_back_to_the_passage(tmp_path: Path) -> None:
    import torch

    from isobench.workloads.infer_text import best_spans, question

    write_text_corpus(tmp_path / "t", 20, 2, 300, seed=4)
    passage = read_text_samples(tmp_path / "t" / CORPUS_FILE)[5]
    tokenizer: Any = load_tokenizer(tmp_path / "t", 40, pairs=True)
    encoding = tokenizer.encode(question(passage), passage)
    assert encoding.type_ids[0] == 0 and 1 in encoding.type_ids and len(encoding.ids) == 40
    passage_tokens = [i for i, (t, s) in enumerate(zip(encoding.type_ids, encoding.sequence_ids, strict=True))
                      if t == 1 and s is not None]
    first, last = passage_tokens[2], passage_tokens[4]
    start, end = torch.zeros(1, 40), torch.zeros(1, 40)
    start[0, first], end[0, last] = 8.0, 8.0
    start[0, 1], end[0, 2] = 20.0, 20.0  # a stronger span inside the question must not win
    [(answer, probability)] = best_spans(start, end, [encoding], [passage], max_answer=30)
    assert answer == passage[encoding.offsets[first][0]:encoding.offsets[last][1]] and answer in passage
    assert 0 < probability < 1
    [(short, _)] = best_spans(start, end, [encoding], [passage], max_answer=1)  # spans of one token only
    assert short in {passage[encoding.offsets[t][0]:encoding.offsets[t][1]] for t in passage_tokens}


def test_generated_data_sets_are_real_formats_and_deterministic(tmp_path: Path) -> None:
    for name, seed in (("a", 2), ("b", 2), ("c", 3)):
        write_wav_folder(tmp_path / f"wav-{name}", 2, 0.4, seed=seed)
        write_recsys_csv(tmp_path / f"csv-{name}", 30, 3, 4, seed=seed)
        write_text_corpus(tmp_path / f"txt-{name}", 20, 2, 100, seed=seed)
    wavs = list_wav_folder(tmp_path / "wav-a")
    with wave.open(str(wavs[0])) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 16000)
        assert 0.3 < wav.getnframes() / 16000 < 0.5
    samples, rate = read_wav(wavs[0])
    assert rate == 16000 and samples.dtype == np.float32 and 0.5 < np.abs(samples).max() <= 1.0
    header, *rows = (tmp_path / "csv-a" / RECSYS_FILE).read_text().splitlines()
    assert header == "label,I1,I2,I3,C1,C2,C3,C4" and len(rows) == 30
    assert recsys_columns(header.split(",")) == ([1, 2, 3], [4, 5, 6, 7])
    assert all(len(r.split(",")[5]) == 8 for r in rows)  # Criteo-style 8-hex-digit categorical hashes
    for kind, file in (("wav", wavs[0].name), ("csv", RECSYS_FILE), ("txt", CORPUS_FILE)):
        a, b, c = ((tmp_path / f"{kind}-{n}" / file).read_bytes() for n in "abc")
        assert a == b != c, kind


def test_criteo_tsv_and_headed_csv_parse_alike(tmp_path: Path) -> None:
    from isobench.workloads.data_import import check
    from isobench.workloads.datasets import recsys_layout
    from isobench.workloads.infer_recsys import parse_rows

    counts, hashes = ["3", "", *["1"] * 11], ["68fd1e64", "", *["0b153874"] * 24]
    tsv = "\t".join(["1", *counts, *hashes])
    delimiter, dense, sparse, header = recsys_layout(tsv + "\n")
    assert (delimiter, dense, sparse, header) == ("\t", list(range(1, 14)), list(range(14, 40)), False)
    [row], [cats] = parse_rows([tsv], dense, sparse, 1000, delimiter)
    assert row[:2] == [math.log1p(3), 0.0] and cats[:2] == [0x68FD1E64 % 1000, 0]
    (tmp_path / "train.txt").write_text(tsv + "\n")
    check("csv", str(tmp_path / "train.txt"))  # accepted as a data_path
    headed = ",".join(["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))])
    delimiter, dense, sparse, header = recsys_layout(headed)
    assert header and parse_rows([tsv.replace("\t", ",")], dense, sparse, 1000, delimiter) == ([row], [cats])


def test_log_mel_features_put_a_tone_in_its_band() -> None:
    from isobench.workloads.infer_speech import hz_to_mel, log_mel, mel_filterbank

    bank = mel_filterbank(40, 512, 16000)
    assert bank.shape == (40, 257) and float(bank.min()) >= 0
    t = np.arange(16000) / 16000
    features = log_mel((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32), 16000, 40)
    assert features.shape == (101, 40)  # 10 ms hop, centred frames
    import torch

    frame = torch.from_numpy(np.hanning(400) * np.sin(2 * np.pi * 1000 * t[:400])).float()
    bands = bank @ torch.fft.rfft(frame, 512).abs().square()
    centre = (int(bands.argmax()) + 1) * hz_to_mel(8000) / 41  # band m is centred on edge m + 1
    assert abs(centre - hz_to_mel(1000)) < hz_to_mel(8000) / 41  # the loudest band is the one around 1 kHz


def test_a_real_data_set_by_path_is_linked_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOBENCH_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "my-images"
    write_jpeg_folder(tmp_path / "gen", 4, 24, 2, seed=0)
    shutil.copytree(tmp_path / "gen", tree)
    (tree / "labels.txt").unlink()
    (tree / "class_001" / "notes.md").write_text("not an image")
    study = {"name": "own", "workloads": [{"name": "image-infer", "params": {"data_path": str(tree), "top_k": 2}}],
             "platforms": [{"name": "baremetal"}], "probes": {}}
    cell = expand(load_study_text(json.dumps(study), "own.yaml"))[0]
    target = Path(prepare_data([cell])[cell.data_key])
    assert target.parent == tmp_path / "cache" / "data" and cell.data_key.startswith("user-imagefolder-")
    copied = sorted(p.relative_to(target) for p in target.rglob("*") if p.is_file())
    assert [str(p) for p in copied] == [f"class_00{i % 2}/img_0000{i}.jpg" for i in (0, 2, 1, 3)]
    original = tree / "class_000" / "img_00000.jpg"
    assert os.stat(target / "class_000" / "img_00000.jpg").st_ino == original.stat().st_ino
    mnist = tmp_path / "MNIST-root"
    write_mnist_idx(mnist / "MNIST" / "raw", 8, seed=0)  # torchvision's layout
    train = {"name": "image-train", "params": {"model": "lenet5", "data_path": str(mnist)}}
    load_study_text(json.dumps({**study, "workloads": [train]}), "own.yaml")  # accepted


@pytest.mark.parametrize(("workload", "make", "problem"), [
    ("image-train", None, "no such file or directory"),
    ("image-train", "empty-dir", "no class folders"),
    ("lenet-train", "empty-dir", "no train-images-idx3-ubyte"),
    ("text-train", "empty-file", "the file is empty"),
    ("text-infer", "empty-dir", "not a file"),
    ("speech-infer", "empty-dir", "no .wav files"),
    ("dlrm-infer", "text-file", "needs dense columns"),
])
def test_a_wrong_data_path_is_refused_when_the_study_loads(tmp_path: Path, workload: str, make: str | None,
                                                           problem: str) -> None:
    path = tmp_path / "data"
    if make == "empty-dir":
        path.mkdir()
    elif make == "empty-file":
        path.write_text("")
    elif make == "text-file":
        path.write_text("just,some,words\n1,2,3\n")
    study = {"name": "x", "workloads": [{"name": workload, "params": {"data_path": str(path)}}],
             "platforms": [{"name": "baremetal"}]}
    with pytest.raises(UserError) as err:
        load_study_text(json.dumps(study), "x.yaml")
    assert err.value.field == "workloads[0].params.data_path" and problem in str(err.value)
    assert err.value.fix and str(err.value).count("\n") == 0


def test_a_wrong_data_path_exits_2_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    study = tmp_path / "s.yaml"
    study.write_text(json.dumps({"name": "x", "platforms": [{"name": "baremetal"}], "workloads": [
        {"name": "text-infer", "params": {"tokenizer_path": str(tmp_path / "missing.json")}}]}))
    out = run_cli("run", str(study), "--out", str(tmp_path / "out"), timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "workloads[0].params.tokenizer_path" in lines[0] and "no such file" in lines[0]
    assert not (tmp_path / "out").exists()


def test_params_refuse_what_cannot_run() -> None:
    from pydantic import ValidationError

    image_train, image_infer = WORKLOADS.get("image-train").Params, WORKLOADS.get("image-infer").Params
    for bad in ({"model": "alexnet", "image_size": 32}, {"model": "resnet18", "dataset": "mnist"},
                {"optimizer": "lbfgs"}, {"device": "tpu"}, {"min_seconds": -1}, {"epochs": -1}):
        with pytest.raises(ValidationError):
            image_train(**bad)
    assert image_train(model="alexnet", image_size=64).model == "alexnet"
    with pytest.raises(ValidationError, match="top_k"):
        image_infer(top_k=11, n_classes=10)
    with pytest.raises(ValidationError, match="top_k"):
        WORKLOADS.get("dlrm-infer").Params(top_k=9, batch_size=8)


def test_estimates_grow_with_the_work_and_the_listing_shows_it_all() -> None:
    for name in TINY:
        params = WORKLOADS.get(name).Params
        small = WORKLOADS.get(name).estimate_s(params())
        more = {"steps": 2000} if "train" in name else {"requests": 2000}
        assert 0 < small < WORKLOADS.get(name).estimate_s(params(**more)), name
        assert WORKLOADS.get(name).estimate_s(params(min_seconds=600)) >= 600
    out = run_cli("workloads", timeout=60, check=True).stdout
    for name in (*TINY, "lenet-train"):
        assert name in out
    assert "optimizer=sgd" in out and "fetch_stall" in out and "data_path=None" in out
