"""The row counts that decide whether work stays in the driver or goes to Spark, each with
the measurement behind it. Imports nothing: the configuration (``pipeline.config``) reads
its defaults here without loading Spark. ``placement`` reads ``local_rows``; the others
decide how rows cross between the driver and Spark."""

LOCAL_ROWS = 2_000_000
"""The one default of ``local_rows`` (``EvalOptions``, ``[engine] local_rows``, ``fixflow
eval --local-rows``): a stratum whose inputs hold at most this many rows each, and which
stays that small, runs in the driver; so does a min/max retraction of a relation that
small. It is the automatic shard size (``engines.async_engine.ROWS_PER_SHARD``): below it
the engine would run one shard, the same loop in one Spark task, so the driver loses no
parallelism; above it a Spark job's fixed cost (tens of ms) no longer dominates
(bench/SMALL_RESULTS.md)."""

COLLECT_AS_ROWS = 10_000
"""A frame of at most this many rows (an epoch's change) is collected as rows, which needs
no job for a local relation; a larger one as Arrow, which always runs one."""

HANDOVER_ROWS = 200_000
"""A changed input the driver holds is handed to Spark as a local relation up to this many
rows; a larger one is stored by Spark as before (making a local relation of 1M rows took
1.3 s, storing the relation on Spark 0.4 s)."""

CHAIN_ROWS = 20_000
"""A larger changed input (``Maintainer._changed_later``) is computed, by the first job that
reads it, from the last rows Spark stored and every change since, as long as those changes
hold at most this many rows; then it is stored (one job) and becomes the new base. Chaining
each epoch's lazy rows on the previous ones instead made a chain as deep as the epochs: the
first job to read it replayed every epoch (22 s after 64) and overflowed the JVM's stack
after a few hundred, and it read stored rows the garbage collection had released."""
