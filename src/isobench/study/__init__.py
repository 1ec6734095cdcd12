"""The study schema: what to measure. Reading and checking a study file is :mod:`isobench.studyfile`."""

from isobench.study.model import Knobs, PlatformEntry, Study, WorkloadEntry

__all__ = ["Knobs", "PlatformEntry", "Study", "WorkloadEntry"]
