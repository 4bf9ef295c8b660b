#!/usr/bin/env bash
# Run the streaming pipeline through spark-submit (client mode: the driver runs here).
#
#   deploy/spark-submit.sh PROGRAM.dl [CONF.toml] [extra spark-submit options...]
#   deploy/spark-submit.sh examples/powerlog_p1_sssp.dl conf/cluster.toml --num-executors 8
#
# The config file stays the single source of truth: the master and spark.jars.packages are
# read from its [spark] section, because jars must be on the command line when the JVM
# starts (setting them later in the session builder is too late under spark-submit).
# Executors need Python with Fixflow installed: the deploy/Dockerfile image on Kubernetes,
# or `pip install fixflow` on every node of a standalone / YARN cluster.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 PROGRAM.dl [CONF.toml] [spark-submit options...]" >&2
  exit 2
fi
PROGRAM=$1
CONF=${2:-conf/cluster.toml}
shift $(( $# >= 2 ? 2 : 1 ))
PYTHON=${PYTHON:-python3}

# One Python call reads the validated config (a bad file fails here with Fixflow's message).
SETTINGS=$("$PYTHON" - "$CONF" <<'PY'
import sys

import fixflow.pipeline.cli.__main__ as cli
from fixflow.pipeline.config import ConfigError, load_config

try:
    config = load_config(sys.argv[1])
except ConfigError as error:
    sys.exit(f"spark-submit.sh: {error}")
packages = config.spark.conf.get("spark.jars.packages", "") or "-"
print(config.spark.master, packages, cli.__file__, sep="\n")
PY
)
{ read -r MASTER; read -r PACKAGES; read -r CLI; } <<< "$SETTINGS"

ARGS=(--master "$MASTER" --deploy-mode client
      --name "fixflow-$(basename "$PROGRAM" .dl)"
      --conf "spark.pyspark.python=${PYSPARK_PYTHON:-$PYTHON}"
      --conf "spark.pyspark.driver.python=$PYTHON")
if [[ $PACKAGES != "-" ]]; then
  ARGS+=(--packages "$PACKAGES")
fi

# cli/__main__.py is Fixflow's entry point as a script; everything after it is `fixflow run ...`.
COMMAND=(spark-submit "${ARGS[@]}" "$@" "$CLI" run "$PROGRAM" --conf "$CONF")
if [[ -n ${DRY_RUN:-} ]]; then  # print the command instead of running it
  printf '%q ' "${COMMAND[@]}"
  echo
  exit 0
fi
exec "${COMMAND[@]}"
