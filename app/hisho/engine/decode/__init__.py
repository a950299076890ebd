"""Decoding: one reply, continuous batches, the serving batch, draft-free speculation, grammars."""
