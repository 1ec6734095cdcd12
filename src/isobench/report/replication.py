"""Which numbers of which paper a built-in replication study corresponds to."""

from __future__ import annotations

REPLICATIONS: dict[str, dict[str, object]] = {
    "park-bahn-2023": {
        "paper": "Park & Bahn 2023, container effects on deep-learning traces (shared/papers/park-bahn-2023-*)",
        "scale": "LeNet-5 training and ResNet-18 inference at minutes-size instead of 10 epochs of SqueezeNet, "
                 "MobileBERT, AlexNet and LSTM; one host (the paper: i7-12700, RTX 3060, HDD)",
        "numbers": [
            ("Table 5: events of container process, container daemon, host process (paper: container ≈ +50% "
             "CPU cycles, page faults > 2×)", "tab-events"),
            ("Tables 9–10: write-backs by reason, single vs 4 containers (paper: periodic 68–82%, background "
             "18–32%, rising to 42% multi-tenant)", "tab-writeback-reasons"),
            ("Fig. 3: write-back call intervals, mean and sd (paper: containers shorter, more variable)",
             "fig-writeback-intervals"),
            ("Fig. 4: write-backs per page over time (paper: spread early, a few hot pages later)",
             "fig-writeback-heat"),
            ("Table 8: page-fault sources (paper: shared-library loading tops the list at 6.2%)", "tab-fault-sources"),
        ],
    },
    "prashanthi-2023": {
        "paper": "Prashanthi et al. 2023, containerized DNN training and inference on Jetson AGX Orin",
        "scale": "LeNet-5 and MobileNetV3-small training and ResNet-18 inference on CPU at a few steps (the paper: "
                 "LeNet, MobileNetV3, ResNet-18/50 on the Orin's GPU); bare metal vs Docker, seccomp on and off",
        "numbers": [
            ("Fig. 1a: minibatch time as fetch stall / compute / logging (paper: LeNet compute +53.7%, MobileNet "
             "+16.3%, ResNet +7.3% in a container)", "fig-minibatch"),
            ("Fig. 7: forward / backward / optimizer split (paper: optimizer step 2.63 → 17.63 ms for MobileNet)",
             "fig-compute"),
            ("Figs. 2, 4: CPU/GPU utilisation and power violins", "fig-util-cpu"),
            ("Fig. 3a: inference time by phase (paper: LeNet +30.5%, MobileNet +12.9%, ResNet < 1%)", "fig-phases"),
            ("Fig. 5: memory footprint (paper: +0.15–0.35 GB in a container)", "fig-memory"),
            ("Figs. 1b, 3b: energy as baseload + incremental", "fig-energy"),
            ("Seccomp off made no difference in the paper: compare docker with docker-noseccomp", "fig-ratios"),
        ],
    },
    "samani-salehi": {
        "paper": "Samani & Salehi, overhead of virtualization platforms on DL inference",
        "scale": "ResNet-18 E2E inference over JPEG files at 1 and 2 cores (the paper: MLPerf ResNet-50 etc. "
                 "at 4–64 cores); bare metal vs container, vanilla (CFS quota) vs pinned (cpuset)",
        "numbers": [
            ("Fig. 4a: E2E inference time by platform and scale-up with the pre/infer/post split",
             "fig-scaleup"),
            ("Section V-C: pinned vs vanilla (paper: pinning removes most of vanilla CN's overhead)", "tab-pinning"),
            ("Fig. 5: GPU vs CPU speed-up, inference only vs E2E (paper: 4–9× inference only, far less E2E)",
             "tab-gpu-speedup"),
        ],
    },
    "siddaramanna-john": {
        "paper": "Siddaramanna & John, containerized DL with DeepBench and Fathom",
        "scale": "kernel-style microbenchmarks on CPU at small shapes (the paper: DeepBench GEMM/conv/RNN kernels "
                 "on P100 GPUs)",
        "numbers": [
            ("Figs. 5–9: kernel time host vs container per kernel and shape (paper: on par, except GRU's frequent "
             "launches)", "tab-kernels"),
            ("Per-variant ratios with CIs", "fig-ratios"),
        ],
    },
}


def replication(study_name: str) -> dict[str, object] | None:
    return REPLICATIONS.get(study_name)
