"""The datasets the benchmarks (and the TPC-DS oracle) load: TPC-H (``tpch``), TPC-DS (``tpcds``)."""
