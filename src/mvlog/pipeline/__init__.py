"""The pipeline: a view compiled, its refresh planned, applied and run, its results and upkeep."""
