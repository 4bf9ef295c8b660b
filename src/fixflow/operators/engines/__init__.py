"""MRA engines behind one seam (``engines.base``): ``sync`` (one Spark job per round over
the whole MonoTable) and ``async`` (sharded local loops with vectorized kernels)."""
