"""llm-generate: the real worker on bare metal, the same tokens on bare metal and in Docker, TTFT
and TPOT from a model that sleeps known times, one-line errors for impossible lengths, and the
summary's own verdicts for TTFT, TPOT and tokens/s."""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rich.console import Console

from isobench.analysis.compare import compare, parse_fail_if
from isobench.errors import UserError
from isobench.plan import expand
from isobench.runner.execute import CellOutcome, platform_for, run_cell
from isobench.runner.setup import prepare_data
from isobench.store import Store
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import CORPUS_FILE, read_text_samples
from isobench.workloads.llm_common import SIZES, LlmParams, build_prompts, load_prompt_tokenizer
from isobench.workloads.llm_generate import LLM_PHASES, serve_requests
from tests.conftest import json_lines, need_docker, run_cli

#: a tiny cell: two prompts a request, so the batch path runs too
TINY: dict[str, Any] = {"size": "tiny", "prompt_tokens": 16, "output_tokens": 8, "batch_size": 2, "requests": 3,
                        "n_samples": 200, "vocab_size": 400, "device": "cpu"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("llm") / "data"
    WORKLOADS.get("llm-generate").prepare_data(LlmParams(**TINY), target)
    return target


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """CellContext.start_run freezes the collector's objects, as a cell should; not this test process."""
    yield
    gc.unfreeze()


def _done_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    return {name: value for name, (value, _unit) in records[-1]["metrics"].items()}


def test_the_worker_generates_and_reports_ttft_tpot_tokens_per_s(data_dir: Path) -> None:
    cell = {"cell_id": "t", "workload": "llm-generate", "params": TINY, "knobs": {"threads": 1}, "seed": 3,
            "data_dir": str(data_dir), "warmup_items": 1}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    records = json_lines(out.stdout)
    done = records[-1]
    assert done["type"] == "done", done
    assert {r["name"] for r in records if r["type"] == "setup"} == {"import", "data_load", "model_load"}
    items = [r for r in records if r["type"] == "item"]
    assert len(items) == 2 == done["items"]  # 3 requests, the first a warm-up
    for item in items:
        assert tuple(item["phases"]) == LLM_PHASES
        assert all(v > 0 for v in item["phases"].values())
        assert sum(item["phases"].values()) == pytest.approx(item["e2e"], rel=1e-9)
    metrics = _done_metrics(records)
    ttfts = [i["phases"]["tokenize"] + i["phases"]["prefill"] for i in items]
    assert metrics["ttft"] == pytest.approx(statistics.median(ttfts))
    assert metrics["ttft_mean"] == pytest.approx(statistics.fmean(ttfts))
    assert metrics["tpot"] == pytest.approx(statistics.fmean(i["phases"]["decode"] / 7 for i in items))
    assert 0 < metrics["tpot"] <= metrics["tpot_p90"] * 1.5
    # tokens/s: every prompt's output tokens over the measured requests' e2e, warm-up left out
    assert metrics["tokens_per_s"] == pytest.approx(2 * 2 * 8 / sum(i["e2e"] for i in items), rel=1e-9)
    shape = SIZES["tiny"]  # keys and values, per layer, per kv head, at the last request's full length
    assert metrics["kv_cache_bytes"] == 2 * shape.layers * shape.kv_heads * (shape.hidden // shape.heads) \
        * (16 + 8 - 1) * 2 * 4
    assert len(done["tokens_digest"]) == 64 and done["digest_requests"] == 3 == done["requests_run"]


def test_the_same_tokens_on_bare_metal_and_in_docker() -> None:
    # Sampled, the harder case: the seeded draws must match as well as the logits (greedy is the
    # logits alone). One case only: each cell spends ~7 s importing transformers' model code.
    need_docker()
    sampling = True
    digests = {}
    for platform in ("baremetal", "docker"):
        study = {"name": "llm", "workloads": [{"name": "llm-generate", "params": {**TINY, "sampling": sampling}}],
                 "platforms": [{"name": platform}], "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0,
                 "probes": {}, "seed": 5}
        cell = expand(load_study_text(json.dumps(study), "llm.yaml"))[0]
        cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])
        platform_obj = platform_for(cell)
        platform_obj.prepare()
        outcome = run_cell(cell, platform_obj)
        assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
        assert len(outcome.items) == 3 and outcome.done is not None
        digests[platform] = outcome.done["tokens_digest"]
    assert digests["baremetal"] == digests["docker"]


class SleepingModel:
    """A step that sleeps a known time (prefill: a prompt; decode: one token) and returns fixed
    logits per last token: random ones (so sampling has choices) keyed by that token's id."""

    def __init__(self, vocab: int, prefill_s: float, decode_s: float) -> None:
        import torch

        self.prefill_s, self.decode_s = prefill_s, decode_s
        self.table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0))

    def __call__(self, ids: Any, cache: int | None) -> tuple[Any, int]:
        time.sleep(self.prefill_s if ids.shape[1] > 1 else self.decode_s)
        return self.table[ids[:, -1]], (cache or 0) + ids.shape[1]


def _serve(data_dir: Path, params: dict[str, Any], model: SleepingModel, warmup: int = 0) -> list[dict[str, Any]]:
    parsed = LlmParams(**{**TINY, **params})
    tokenizer = load_prompt_tokenizer(data_dir, parsed.prompt_tokens)
    prompts = build_prompts(tokenizer, read_text_samples(data_dir / CORPUS_FILE), parsed.prompt_tokens, seed=1)
    stream = io.StringIO()
    ctx = CellContext(stream, {"seed": 1, "warmup_items": warmup})
    import torch

    serve_requests(ctx, parsed, model, tokenizer, prompts, torch.device("cpu")).report(ctx)
    ctx.finish()
    return json_lines(stream.getvalue())


def test_ttft_and_tpot_come_from_the_models_own_times(data_dir: Path, unfrozen: None) -> None:
    prefill_s, decode_s = 0.04, 0.01
    records = _serve(data_dir, {"output_tokens": 5, "requests": 4}, SleepingModel(400, prefill_s, decode_s),
                     warmup=1)
    items = [r for r in records if r["type"] == "item"]
    assert len(items) == 3
    metrics = _done_metrics(records)
    # the first token is prefill's; the other four are decode steps of one sleep each
    assert prefill_s <= metrics["ttft"] < prefill_s + 0.03
    assert decode_s <= metrics["tpot"] < decode_s + 0.008
    assert decode_s <= metrics["tpot_p90"] < decode_s + 0.015
    for item in items:
        assert item["phases"]["prefill"] >= prefill_s and item["phases"]["decode"] >= 4 * decode_s
    assert metrics["tokens_per_s"] == pytest.approx(3 * 2 * 5 / sum(i["e2e"] for i in items), rel=1e-9)
    assert metrics["tokens_per_s"] < 2 * 5 / (prefill_s + 4 * decode_s)


def test_sampling_draws_the_same_tokens_per_request_whatever_ran_before(data_dir: Path, unfrozen: None) -> None:
    model = SleepingModel(400, 0.0, 0.0)
    greedy = _serve(data_dir, {"requests": 3}, model)[-1]
    sampled = _serve(data_dir, {"requests": 3, "sampling": True}, model)[-1]
    # warm-up items and a minimum duration change how many requests run, not what request i draws
    longer = _serve(data_dir, {"requests": 3, "sampling": True, "min_seconds": 0.2}, model, warmup=2)[-1]
    assert longer["requests_run"] > 3 and longer["digest_requests"] == sampled["digest_requests"] == 3
    assert longer["tokens_digest"] == sampled["tokens_digest"] != greedy["tokens_digest"]
    hotter = _serve(data_dir, {"requests": 3, "sampling": True, "temperature": 5.0}, model)[-1]
    assert hotter["tokens_digest"] != sampled["tokens_digest"]


def test_lengths_beyond_the_models_positions_are_one_clear_error(tmp_path: Path) -> None:
    positions = SIZES["tiny"].positions
    LlmParams(size="tiny", prompt_tokens=positions - 8, output_tokens=8)  # exactly full: fine
    with pytest.raises(ValidationError, match=f"exceeds the {positions} positions of size tiny"):
        LlmParams(size="tiny", prompt_tokens=positions - 8, output_tokens=9)
    study = {"name": "x", "platforms": [{"name": "baremetal"}],
             "workloads": [{"name": "llm-generate", "params": {"prompt_tokens": 500, "output_tokens": 100}}]}
    with pytest.raises(UserError) as err:
        load_study_text(json.dumps(study), "x.yaml")
    assert err.value.field == "workloads[0].params" and "600 exceeds the 512 positions" in str(err.value)
    assert err.value.fix and "larger size" in err.value.fix and "\n" not in str(err.value)
    path = tmp_path / "x.yaml"
    path.write_text(json.dumps(study))
    result = run_cli("plan", str(path), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "positions" in result.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


SUMMARY_STUDY = """
name: llm-known
workloads:
  - name: llm-generate
    params: {requests: 4}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker}
repetitions: 6
warmup: 0
"""
#: docker's effect per metric: prefill unchanged, decode 30% slower, so tokens/s falls
EFFECT = {"ttft": 1.0, "tpot": 1.3, "tokens_per_s": 0.8, "kv_cache_bytes": 1.0}
BASE = {"ttft": 0.02, "tpot": 0.004, "tokens_per_s": 200.0, "kv_cache_bytes": 1e5}


def _llm_outcome(cell: Any, rep: int) -> CellOutcome:
    wobble = (1.0, 1.004, 0.997, 1.002, 0.999, 1.001)[(rep + len(cell.platform_key)) % 6]
    factor = {name: (EFFECT[name] if cell.platform_key == "docker" else 1.0) * wobble for name in BASE}
    metrics = {name: [BASE[name] * factor[name], ""] for name in BASE}
    e2e = 0.15 * factor["tpot"]
    items = [{"i": i, "e2e": e2e, "phases": {"decode": e2e * 0.8}} for i in range(4)]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0,
                       wall_s=1.0, startup_s=0.1, setup={"import": 0.01}, items=items,
                       done={"type": "done", "items": 4, "run_s": e2e * 4, "metrics": metrics})


def test_ttft_tpot_and_tokens_per_s_each_get_a_verdict_in_the_summary(tmp_path: Path) -> None:
    from isobench.report.terminal import print_summary

    study = load_study_text(SUMMARY_STUDY, "llm-known.yaml", check_host=False)
    store = Store.create(tmp_path, SUMMARY_STUDY, "llm-known", "llm-known.yaml", {})
    for cell in expand(study):
        assert store.record(_llm_outcome(cell, cell.rep), cell.platform_key)
    found = {c.metric: c for c in compare(store) if c.label == "docker"}
    assert found["workload.ttft"].verdict == "equivalent"
    assert found["workload.tpot"].verdict == "slower" and "slower" in found["workload.tpot"].effect
    # tokens/s is a rate: fewer tokens a second is slower, its ratio stays tokens/s over tokens/s
    rate = found["workload.tokens_per_s"]
    assert rate.verdict == "slower" and rate.ratio == pytest.approx(0.8, rel=0.01) and "slower" in rate.effect
    assert found["workload.kv_cache_bytes"].verdict in ("equivalent", "inconclusive")
    assert parse_fail_if("slower:1.2").trips(rate) and not parse_fail_if("slower:1.3").trips(rate)
    console = Console(file=io.StringIO(), width=400, color_system=None)
    print_summary(store, compare(store), console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = [line for line in text.splitlines() if line.startswith("docker: llm-generate")]
    for metric in ("e2e", "workload.ttft", "workload.tpot", "workload.tokens_per_s"):
        assert sum(f"llm-generate {metric} " in line for line in lines) == 1, (metric, lines)
    assert not any("kv_cache_bytes" in line or "tpot_p90" in line for line in lines)
    assert any("workload.tokens_per_s 0.80× baremetal" in line and "% slower" in line for line in lines)
