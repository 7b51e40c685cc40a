"""Planning a run for the hardware it will use: the per-replica memory plan."""
