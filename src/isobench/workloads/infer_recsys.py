"""dlrm-infer: end-to-end click-through prediction with a small DLRM over a Criteo-style CSV
(or Criteo's own tab-separated ``train.txt``, given by ``data_path``).

Per request (``batch_size`` impressions): ``preprocess`` (parse the CSV rows, log-transform
the dense counts, hash each categorical value into its embedding table, as MLPerf's DLRM
does with ``--max-ind-range``), ``inference`` (bottom MLP, embedding lookups, dot-product
interaction, top MLP) and ``postprocess`` (sigmoid, the top-k impressions by click
probability, each mapped to ``click``/``no-click``). The CSV is read into memory at
``data_load``, as MLPerf's harness loads its samples before timing.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.data_import import check, fingerprint, materialise
from isobench.workloads.datasets import RECSYS_FILE, recsys_layout, write_recsys_csv
from isobench.workloads.inference import INFER_PHASES, INFER_SETUP, InferParams, infer_loop
from isobench.workloads.timing import resolve_device

TORCH_IMPORT_S = 4.0
CLICK_LABELS = ("no-click", "click")


class DlrmInferParams(InferParams):
    batch_size: int = Field(64, ge=1, le=65536, description="impressions (CSV rows) per request")
    n_rows: int = Field(4096, ge=1, le=100_000_000, description="rows in the generated CSV")
    n_dense: int = Field(13, ge=1, le=1000, description="dense features of the generated CSV (Criteo: 13)")
    n_sparse: int = Field(26, ge=1, le=1000, description="categorical features of the generated CSV (Criteo: 26)")
    table_size: int = Field(10_000, ge=2, le=100_000_000, description="rows per embedding table (values hashed)")
    dim: int = Field(16, ge=2, le=1024, description="embedding width")

    @model_validator(mode="after")
    def _top_k_fits(self) -> DlrmInferParams:
        self.top_k_within(self.batch_size, "batch_size")
        return self


def parse_rows(lines: list[str], dense_cols: list[int], sparse_cols: list[int], table_size: int,
               delimiter: str = ",") -> tuple[list[list[float]], list[list[int]]]:
    """Dense: log(1 + max(x, 0)), missing = 0; categorical: hexadecimal hash mod the table size."""
    dense, sparse = [], []
    for row in csv.reader(lines, delimiter=delimiter):
        dense.append([math.log1p(max(float(row[i]), 0.0)) if row[i] else 0.0 for i in dense_cols])
        sparse.append([int(row[i], 16) % table_size if row[i] else 0 for i in sparse_cols])
    return dense, sparse


@WORKLOADS.register("dlrm-infer")
class DlrmInfer(Workload):
    description = "E2E click-through prediction with a small DLRM over a Criteo-style CSV"
    item = "request"
    phases = INFER_PHASES
    setup_phases = INFER_SETUP
    Params = DlrmInferParams
    imports = ("torch",)

    @classmethod
    def data_key(cls, params: DlrmInferParams) -> str:  # type: ignore[override]
        if params.data_path:
            return f"user-csv-{fingerprint(params.data_path)}"
        return f"recsys-n{params.n_rows}-d{params.n_dense}-c{params.n_sparse}-s0"

    @classmethod
    def check_host(cls, params: DlrmInferParams) -> None:  # type: ignore[override]
        if params.data_path:
            check("csv", params.data_path)

    @classmethod
    def prepare_data(cls, params: DlrmInferParams, target: Path) -> None:  # type: ignore[override]
        if params.data_path:
            materialise("csv", params.data_path, target)
        else:
            write_recsys_csv(target, params.n_rows, params.n_dense, params.n_sparse, seed=0)

    @classmethod
    def estimate_s(cls, params: DlrmInferParams) -> float:  # type: ignore[override]
        per_row = 4e-5 + params.n_sparse * 1e-6
        return max(TORCH_IMPORT_S + 1.0 + params.requests * (0.001 + params.batch_size * per_row), params.min_seconds)

    def run(self, params: DlrmInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads.nets import Dlrm

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "dlrm-infer needs its data set"
        with ctx.setup("data_load"):
            lines = (ctx.data_dir / RECSYS_FILE).read_text().splitlines()
            delimiter, dense_cols, sparse_cols, has_header = recsys_layout(lines[0])
            lines = lines[1:] if has_header else lines
            if not lines:
                raise ValueError(f"{ctx.data_dir / RECSYS_FILE}: no rows after the header")
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = Dlrm(len(dense_cols), len(sparse_cols), params.table_size, params.dim).to(device).eval()

        def preprocess(index: int) -> tuple[Any, Any]:
            start = index * params.batch_size
            rows = [lines[(start + i) % len(lines)] for i in range(params.batch_size)]
            dense, sparse = parse_rows(rows, dense_cols, sparse_cols, params.table_size, delimiter)
            return (torch.tensor(dense, dtype=torch.float32).to(device, non_blocking=True),
                    torch.tensor(sparse, dtype=torch.long).to(device, non_blocking=True))

        def postprocess(logits: Any) -> list[tuple[int, float, str]]:
            probabilities = torch.sigmoid(logits)
            top = torch.topk(probabilities, params.top_k)
            return [(i, p, CLICK_LABELS[p >= 0.5]) for p, i in zip(top.values.tolist(), top.indices.tolist(),
                                                                    strict=True)]

        infer_loop(ctx, params, device, preprocess, lambda batch: model(*batch), postprocess)
