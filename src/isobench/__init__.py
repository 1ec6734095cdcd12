"""isobench: what does this execution platform cost my deep-learning workload, and why?"""

__version__ = "0.1.0"

# The API a user's own script calls; stdlib only, and a no-op outside an isobench cell.
from isobench.api import metric, phase, step  # noqa: E402

__all__ = ["metric", "phase", "step"]
