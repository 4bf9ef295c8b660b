"""The driver backend: the strategies' loops over numpy batches (``engines.kernels``) in the
driver, without Spark jobs, as peers of their Spark side (``spark_backend``, ``engines``).

- ``rows``: frames ⇄ batches ⇄ Arrow tables;
- ``stratum``: a stratum's bootstrap (``LocalStratum``: the semi-naive loop's
  ``RoundBackend``, ``DriverNaive``, ``DriverMra`` for ``engines.mra_bootstrap``);
- ``copies``: the driver's rows of the Maintainer's frames (``DriverCopies``);
- ``retraction``: the min/max retraction's backend (``DriverRetraction`` for
  ``strategies.mra_retract``).

Where a stratum runs is ``placement.place``'s decision."""
