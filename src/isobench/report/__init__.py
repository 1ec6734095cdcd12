"""Present results: terminal tables, sentences, exports."""
