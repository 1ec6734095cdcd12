"""Study files: what to measure, validated before anything runs."""

from isobench.study.loader import DEFAULT_STUDY, load_study, load_study_text
from isobench.study.model import Knobs, PlatformEntry, Study, WorkloadEntry

__all__ = ["DEFAULT_STUDY", "Knobs", "PlatformEntry", "Study", "WorkloadEntry", "load_study",
           "load_study_text"]
