"""Turn stored cells into comparisons with honest uncertainty."""
