"""nvmsim: trace-driven simulation of an NVM flush layer between memory and slow storage
(Park & Bahn 2023, Section 5), with a reference loop, a compiled fast path and a
one-pass LRU capacity sweep."""
