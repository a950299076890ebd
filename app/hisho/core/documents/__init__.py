"""Documents: extraction with references, job planning, batched map-reduce summaries, a resumable cache.

See docs/summarization.md for the prompts, chunk sizes and the batching strategy.
"""
