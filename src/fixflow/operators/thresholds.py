"""The row counts that decide whether work stays in the driver or goes to Spark, each with
the measurement behind it. Imports nothing: the configuration (``pipeline.config``) reads
its defaults here without loading Spark (``operators.memory_model`` turns ``auto`` into
rows). ``placement`` reads ``local_rows``; the others decide how rows cross between the
driver and Spark."""

LOCAL_ROWS = "auto"
"""The one default of ``local_rows`` (``[engine] local_rows``, ``fixflow eval --local-rows``;
``EvalOptions`` holds it resolved, ``resolved_local_rows``): a stratum whose inputs hold at
most this many rows together, and which stays that small, runs in the driver; so does a
min/max retraction of a relation that small. ``auto`` is as many rows as the driver's share
of the machine's memory holds by the memory model below: ~114M rows on this 2-core, 23.6 GiB
machine. The driver runs one shard without a Spark job; on Spark, a sharded stratum pays a
job per stage and ships its rows each time, and measured slower at every size that fits
(R-MAT 10M edges, permuted ids: SSSP 121 s on two Spark shards, ~16 s in the driver, whole
process; bench/SCALE_RESULTS.md), so the driver's memory, not a row count, is the limit."""

DRIVER_FIXED_BYTES = 600_000_000
DRIVER_BYTES_PER_ROW = 105
"""The memory model of a stratum in the driver: peak resident bytes = ``DRIVER_FIXED_BYTES``
+ ``DRIVER_BYTES_PER_ROW`` x input rows. Fitted to the peak RSS (``wait4``) of ``fixflow
eval`` of R-MAT graphs (``edge(src, dst, w)``, number/number/float, `;` spellings): 10M
edges SSSP 1.6 GB, CC 1.4 GB; 100M edges SSSP 10.4 GB, CC 11.0 GB (bench/SCALE_RESULTS.md,
bench/SCALE_100M_RESULTS.md). The fixed part is the interpreter, its libraries and one
frontier slice's candidates (``shard_loop.SLICE_CANDIDATES``); per row: the facts table
(which the kernels read without a copy), each recursive body's join index, the table of
keys, and the reader's transient copy of the file."""

DRIVER_MEMORY_SHARE = 0.5
"""The share of the machine's physical memory ``auto`` lets the driver's strata use: the
rest is for the process's other relations, Spark's JVM when a later stratum starts it, and
the operating system."""


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

TASK_IO_ROWS = 10_000_000
"""The default of ``[lake] task_io_rows``: a relation on Spark of more than this many rows is
written into its Delta table by Spark tasks (a Parquet file each, committed by the driver in
one transaction, ``pipeline/lake/task_write.py``), and a stream's EDB or result table of more
than this many rows is read back by tasks (``pipeline/lake/task_read.py``); smaller ones pass
through the driver. Chosen by the driver's memory, not by time: collecting a (number, float)
result raised the driver's peak by ~23 bytes a row (0.23 GB at 10M rows, 0.08 GB at 1M),
which the tasks' path does not (flat at its resting size), but on this 2-core machine the
tasks' path was the slower at both sizes (10M rows: 18-45 s against 3-26 s, load ~20;
bench/bench_lake_write.py, bench/SCALE_RESULTS.md): each task pays Spark's Arrow transfer to
a Python worker, and the check of the size is a job. So the driver keeps what costs it
under a quarter of a GB."""

ROW_GROUP_ROWS = 1_000_000
"""Rows a Spark task gathers from its Arrow batches (Spark sends 10,000 rows a batch) before
it writes them as one Parquet row group (``pipeline/lake/task_write.py``): a row group a
batch made a 10M-row table of 1,000 row groups and the tasks' write slower than
collecting it (bench/SCALE_RESULTS.md); a task holds at most this many rows besides."""

TASK_LOOP_ROWS = 20_000_000
"""The rows a ``set``, ``aggregate-seminaive`` or ``naive`` stratum's loop may hold in one
Spark task (``EvalOptions.task_rows``, ``operators.task_stratum``) before Spark continues it
a job a round. Not a time crossover (one task was faster in every case measured,
bench/FORMS_RESULTS.md, 2026-12-06): a bound on one Python worker's memory, as
``local_rows`` bounds the driver's. Measured: TC of a 10k-node DAG (3.7M pairs of numbers,
``bench_forms.py --graphs dag_10k --programs tc``) peaked at 0.98 GB against 0.25 GB for a
152k-pair one, ~200 bytes a held row with the held keys' indexes and a round's slices
(``LocalStratum.bounded``), so 20M rows is ~4 GB of one worker."""

TASK_READ_ROWS = 1_000_000
"""A facts file of more rows (estimated from its size) than the driver holds is read by
Spark tasks (``lake.task_facts``) from this size on; below it the driver reads it and
hands it to Spark as a local relation, which costs no job."""

FRONTIER_SCAN_SHARE = 64
"""A shard's frontier is taken from the rows touched since the last one while they are at
most 1/this of its table, else by a scan of the pending flags (``shard_table.LocalTable
.pending_rows``): numbering (``np.unique``) n touched rows cost more than scanning a 1M-row
table's flags (~0.3 ms) from n ~ 15k on; CC on grid_1m touches ~1/50 of its rows an
iteration, SSSP on it tens of rows."""

SLOT_SORT_SHARE = 8
"""A merge by position numbers the rows it hits by sorting the candidates (``np.unique``)
while they are fewer than 1/this of the table, else by counting over the table
(``shard_table._slots``): measured crossover on 350k and 1M rows (unique 3.7 ms against
counting 5.9 ms for 125k candidates of 1M rows; 10.6 against 9.2 ms for 300k)."""

SCIPY_SORT_ROWS = 5_000
"""From this many rows on, ``key_groups.grouped_order`` sorts codes by SciPy's CSR
construction, a counting sort in C; below it, by numpy's stable argsort, which gives the
same order. Measured crossover (best of 50): 1,000 rows numpy 0.02 against SciPy's 0.05
ms; 5,000 rows 0.07 both; 20,000 rows 1.03 against 0.13 ms; 1M rows 85 against 12.6 ms.
A program that never sorts that many rows then never imports SciPy: 0.2 s of the ~1.2 s
`fixflow eval` of a bundled example (``bench/bench_examples.py``)."""
