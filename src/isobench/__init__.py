"""isobench: what does this execution platform cost my deep-learning workload, and why?"""

__version__ = "0.1.0"
