"""DeepBench-style kernel microbenchmarks (Siddaramanna & John): GEMM, convolution, RNN
cells, all-reduce, and on CUDA hosts host<->device copies and kernel-launch latency.

One item is one pass over the workload's shapes; each shape is a phase named by its kernel
and shape (``gemm:1760x16x1760:NN``), holding the time of that shape's ``calls`` back-to-back
calls, so phases sum to the item's e2e and a comparison of ``phase.<label>`` between two
platforms is the "kernel time host vs container per kernel and shape" of the paper. The
cell also reports, through ``done.metrics`` (stored as ``workload.<label>.<rate>``), the
mean time per call and the achieved FLOP/s or bandwidth. :func:`describe` turns a label
back into its fields for analysis.
"""

from __future__ import annotations

from isobench.workloads.kernels.common import describe

__all__ = ["describe"]
