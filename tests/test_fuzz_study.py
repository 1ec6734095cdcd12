"""Fuzz the study loader: whatever a study file holds, the loader returns a Study or raises
UserError (one line, exit 2), never another exception."""

from __future__ import annotations

import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isobench.errors import UserError
from isobench.studyfile import load_study_text, validate_study

KEYS = ["name", "description", "workloads", "platforms", "baseline", "knobs", "repetitions", "warmup", "seed",
        "timeout_s", "probes", "max_cells", "label", "params", "sweep", "image", "options", "kernel", "cpuset",
        "cpus", "threads", "memory", "iterations", "work", "from_platform", "buffer_kb", "ftrace", "tenants"]
NAMES = ["cpu-spin", "baremetal", "docker", "vm", "deploy-infer", "script", "oci", "gvisor"]
text = st.one_of(st.sampled_from(NAMES + KEYS + ["a[/x]", "../x", "0-100000", "--privileged", "/etc/shadow",
                                                 "auto", "1g", "$\\foo$", "=1+1"]),
                 st.text(max_size=20))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), text)
values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.one_of(st.sampled_from(KEYS), scalars), children,
                                                    max_size=4)), max_leaves=20)
entry = st.fixed_dictionaries({"name": st.sampled_from(NAMES)}, optional={k: values for k in KEYS[9:]})
studies = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fuzz"), text), "workloads": st.lists(entry, max_size=3),
     "platforms": st.lists(entry, max_size=3)},
    optional={k: values for k in KEYS[4:13]})


def check(raw: Any) -> None:
    try:
        validate_study(raw, "fuzz.yaml")
    except UserError as err:
        assert "\n" not in str(err)


def check_text(source: str) -> None:
    try:
        load_study_text(source, "fuzz.yaml")
    except UserError as err:
        assert "\n" not in str(err)


#: examples per fuzz test: 300 in the suite (each loads a study through the design resolver, about
#: 55 ms here); ISOBENCH_FUZZ_EXAMPLES=5000 for a deeper search before a release
FUZZ = settings(max_examples=int(os.environ.get("ISOBENCH_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=list(HealthCheck))


@FUZZ
@given(studies)
def test_study_dicts(raw: dict[str, Any]) -> None:
    check(raw)


@FUZZ
@given(st.one_of(studies.map(lambda s: yaml.safe_dump(s, allow_unicode=True)), st.text(max_size=200),
                 values.map(yaml.safe_dump)))
def test_study_texts(source: str) -> None:
    check_text(source)
