"""``hisho bench …``: side-by-side benchmarks. Each module has ``run(args) -> dict`` and reports ratios against a
baseline measured in the same run, because these machines are shared and noisy."""
