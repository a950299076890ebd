"""The engine measuring itself: the memory probe the planner runs and the raw llama-cpp-python baseline of the decode bench."""
