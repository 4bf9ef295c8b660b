"""``python -m fixflow.pipeline.cli``, and the script spark-submit runs
(deploy/spark-submit.sh): the `fixflow` command."""

import sys

from fixflow.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
