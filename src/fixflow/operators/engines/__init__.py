"""MRA engines behind one seam (``engines.base``): ``sync`` (one Spark job per round over
the whole MonoTable, ``engines.sync``); ``async`` and ``hybrid`` (sharded local loops with
vectorized kernels, ``engines.async_engine``; relations whose plans do not compile to
kernels run on ``sync``). ``engines.modes`` turns an ``[engine] mode`` into an engine.

This package's ``__init__`` imports nothing: its modules import one another by their own
names, so importing any of them does not import every engine.
"""
