"""mvlog's benchmarks: one runner (``python -m benchmarks``), scenarios registered by name
(``benchmarks/scenarios``), a shared harness, datasets, results as JSON lines (``benchmarks/results``)
and BENCHMARKS.md's report written from them."""
