"""The Models screen: installed models, the hub search and its downloads, and the memory planner panel
that says what a model costs on this machine."""
