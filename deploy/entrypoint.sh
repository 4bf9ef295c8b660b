#!/usr/bin/env bash
# Entrypoint of the Fixflow image. On Kubernetes the Spark driver creates executor pods from
# this image with the single argument "executor" and describes the executor in SPARK_*
# environment variables; that case starts Spark's Kubernetes executor backend. Anything else
# (fixflow ..., spark-class ..., a shell) runs as given.
set -euo pipefail

if [[ ${1:-} != executor ]]; then
  exec "$@"
fi

# SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...: the executor JVM's options, in index order.
java_options=()
while IFS= read -r option; do
  java_options+=("$option")
done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//' || true)

classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
classpath+="${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"

exec "$JAVA_HOME/bin/java" "${java_options[@]}" \
  -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" \
  --executor-id "$SPARK_EXECUTOR_ID" \
  --cores "$SPARK_EXECUTOR_CORES" \
  --app-id "$SPARK_APPLICATION_ID" \
  --hostname "$SPARK_EXECUTOR_POD_IP" \
  --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
  --podName "$SPARK_EXECUTOR_POD_NAME"
