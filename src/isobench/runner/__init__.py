"""Runs cells on platforms and stores what they report."""
