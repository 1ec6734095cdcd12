"""Fuzz the study loader with 100,000 generated study files (tests/test_fuzz_study.py's
strategies) and print how many raised something other than UserError: it must be 0.

    .venv/bin/python benchmarks/fuzz_study.py [EXAMPLES]
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from isobench.errors import UserError  # noqa: E402
from isobench.studyfile import load_study_text  # noqa: E402
from tests.test_fuzz_study import studies, values  # noqa: E402

tracebacks: Counter[str] = Counter()
runs = 0


def main(examples: int) -> int:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.one_of(studies.map(lambda s: yaml.safe_dump(s, allow_unicode=True)), st.text(max_size=200),
                     values.map(yaml.safe_dump)))
    def fuzz(source: str) -> None:
        global runs
        runs += 1
        try:
            load_study_text(source, "fuzz.yaml")
        except UserError:
            pass
        except Exception:  # counted, not raised: the run goes on to count them all
            tracebacks[traceback.format_exc().strip().splitlines()[-1]] += 1

    fuzz()
    for line, count in tracebacks.most_common(10):
        print(f"{count:6d}  {line}")
    print(f"{runs} study files, {sum(tracebacks.values())} tracebacks")
    return 1 if tracebacks else 0


def positive(text: str) -> int:
    """A count of examples; argparse turns the ValueError into a usage line and exit 2."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0].replace("\n", " "))
    parser.add_argument("examples", nargs="?", type=positive, default=100_000,
                        help="how many study files to generate (default 100000)")
    sys.exit(main(parser.parse_args().examples))
