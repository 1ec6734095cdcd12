"""lenet-train: LeNet-5 on MNIST idx files, the ``image-train`` loop with LeNet's defaults.

Kept under its own name (studies use it); everything else is ``image-train``'s: phases
``fetch_stall``, ``forward``, ``backward``, ``optimizer``, ``logging`` per minibatch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.train_image import ImageTrain, ImageTrainParams


class LenetTrainParams(ImageTrainParams):
    model: Literal["lenet5"] = Field("lenet5", description="LeNet-5 (fixed)")
    # 16, as every built-in study uses: at 32, one process ran 10-20% slower than the identical
    # process beside it for a whole cell on these VMs (pairing cannot cancel what differs between
    # the two processes of a pair), and a study's A/A read ±2.5-5.3% where 16 read ±1.0-1.6%.
    batch_size: int = Field(16, ge=1, le=65536, description="images per minibatch")
    steps: int = Field(60, ge=1, le=10_000_000, description="timed minibatches (epochs cycle as needed); "
                                                            "ignored when epochs > 0")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="sgd (momentum 0.9) or adam")
    n_train: int = Field(2048, ge=1, le=10_000_000, description="images in the generated data set")


@WORKLOADS.register("lenet-train")
class LenetTrain(ImageTrain):
    description = "LeNet-5 training on MNIST-format idx files (image-train with LeNet's defaults)"
    Params = LenetTrainParams
