"""What the analysis makes of llm-serve's cells, on stores of known values (no cell runs): TTFT, TPOT
and tokens/s each get a comparison and a verdict, and the decode-bound and stream-path hints fire
where one kind of phase holds the extra time, and stay silent where it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from isobench.analysis.summary import analyse
from isobench.plan import expand
from isobench.runner.drivers import HostDriver
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text
from isobench.workloads.llm_serve import ITEM_PHASES

STUDY = """
name: llm-serve-known
workloads:
  - name: llm-serve
    params: {requests: 4, output_tokens: 8}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker}
repetitions: 6
warmup: 0
"""
#: seconds per request, a tiny Llama served over loopback
BASE = {"connect": 3e-4, "queue": 3e-5, "tokenize": 3e-4, "prefill": 2e-3, "decode": 1.4e-2, "detokenize": 2e-4,
        "server_other": 1e-3, "transport": 8e-4}
#: docker's effect on each phase, per case
EFFECTS: dict[str, dict[str, float]] = {
    "decode": {"decode": 1.3},  # the memory-bound steps only
    "stream": {"transport": 4.0, "connect": 2.0},  # the network path only
    "compute": {"prefill": 1.3, "decode": 1.3},  # every model step: neither hint's pattern
}


def _outcome(cell: Any, effect: dict[str, float]) -> CellOutcome:
    wobble = (1.0, 1.004, 0.997, 1.002, 0.999, 1.001)[(cell.rep + len(cell.platform_key)) % 6]
    factor = {name: (effect.get(name, 1.0) if cell.platform_key == "docker" else 1.0) * wobble for name in BASE}
    phases = {name: BASE[name] * factor[name] for name in ITEM_PHASES}
    e2e = sum(phases.values())
    stream = phases["connect"] + phases["transport"] / 2
    metrics = {"ttft": [stream + phases["queue"] + phases["tokenize"] + phases["prefill"], "s"],
               "tpot": [phases["decode"] / 7, "s"], "tokens_per_s": [8 / e2e, "tokens/s"],
               "transport_share": [(phases["connect"] + phases["transport"]) / e2e, ""]}
    items = [{"i": i, "e2e": e2e, "phases": phases} for i in range(4)]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0,
                       wall_s=1.0, startup_s=0.1, setup={"import": 0.01}, items=items,
                       done={"type": "done", "items": 0, "run_s": e2e * 4, "metrics": metrics})


def _analysis(directory: Path, case: str) -> Any:
    study = load_study_text(STUDY, "llm-serve-known.yaml", check_host=False)
    store = Store.create(directory, STUDY, "llm-serve-known", "llm-serve-known.yaml", {})
    for cell in expand(study):
        assert store.record(_outcome(cell, EFFECTS[case]), cell.platform_key)
    store.close()
    return analyse(Store.open(directory), with_views=False)


@pytest.mark.parametrize(("case", "verdicts", "rule"), [
    ("decode", {"ttft": "equivalent", "tpot": "slower", "tokens_per_s": "slower"}, "decode-bound"),
    ("stream", {"ttft": "slower", "tpot": "equivalent", "tokens_per_s": "slower"}, "stream-path"),
    ("compute", {"ttft": "slower", "tpot": "slower", "tokens_per_s": "slower"}, None),
])
def test_each_token_metric_has_its_verdict_and_the_hint_names_where_the_time_went(
        tmp_path: Path, case: str, verdicts: dict[str, str], rule: str | None) -> None:
    analysis = _analysis(tmp_path, case)
    found = {c.metric: c for c in analysis.comparisons if c.label == "docker"}
    for name, verdict in verdicts.items():
        assert found[f"workload.{name}"].verdict == verdict, (name, found[f"workload.{name}"])
    # tokens/s is a rate: fewer a second reads slower, and its ratio stays tokens/s over tokens/s
    assert found["workload.tokens_per_s"].ratio < 1 and "slower" in found["workload.tokens_per_s"].effect
    fired = [h for h in analysis.hints if h.rule in ("decode-bound", "stream-path")]
    assert [h.rule for h in fired] == ([rule] if rule else []), [h.text for h in fired]
    if rule == "decode-bound":
        assert "decode grows 1.30×" in fired[0].text and "prefill holds at 1.00×" in fired[0].text
        assert "memory bandwidth and page faults" in fired[0].text and fired[0].figure == "fig-phases-llm-serve"
    if rule == "stream-path":
        assert "transport 4.00× (0.80 → 3.20 ms)" in fired[0].text and "connect 2.00×" in fired[0].text
        assert "100% of the extra time" in fired[0].text and "network: host" in fired[0].text
    assert not any(h.text.startswith("llm-serve on aa") for h in analysis.hints)


def test_a_duet_members_start_line_is_not_the_servers_ready_record() -> None:
    """A duet member reports ready (no port) at its start line, then the server reports its port: the
    driver must wait for the second."""

    class Proc:
        def poll(self) -> None:
            return None

    class Launched:
        proc = Proc()

    cell = type("Cell", (), {"seq": 0})()
    records: list[dict[str, Any]] = [{"type": "setup", "name": "import", "dur": 1.0}, {"type": "ready"}]
    driver = HostDriver(cell, None, Launched(), records)  # type: ignore[arg-type]
    records.append({"type": "ready", "port": 4242, "token": "t"})
    assert driver._wait_ready() == {"type": "ready", "port": 4242, "token": "t"}


def test_llm_phases_stack_in_the_order_a_request_passes_them() -> None:
    from isobench.analysis.views.phases import phase_sorted

    served = ["transport", "decode", "server_other", "prefill", "queue", "detokenize", "connect", "tokenize"]
    assert phase_sorted(served) == ["connect", "queue", "tokenize", "prefill", "decode", "detokenize",
                                    "server_other", "transport"]
    assert phase_sorted(["zeta", "backward", "forward", "alpha"]) == ["forward", "backward", "alpha", "zeta"]
