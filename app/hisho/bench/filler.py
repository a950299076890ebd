"""Generated text the resume benches read: plain sentences of predictable length, the same every run."""

from __future__ import annotations


def document(n_sentences: int) -> str:
    colours = ("red", "green", "blue", "yellow", "white")
    return " ".join(f"Item {i} is a {colours[i % 5]} box holding {i * 7 % 13} apples." for i in range(n_sentences))
