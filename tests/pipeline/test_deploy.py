"""deploy/: the files Docker, Prometheus, Grafana and Kubernetes read, checked without them.

Docker does not run here, so these tests read every file the way its consumer would and
cross-check what the consumers must agree on: ports, paths, service names, the configs
(loaded with Fixflow's own loader), and above all the dashboard's PromQL against the
metrics the pipeline registers, so the dashboard cannot drift from the code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from fixflow.checker.parser import parse
from fixflow.pipeline.config import MetricsConfig, load_config, parse_config
from fixflow.pipeline.spark import cluster_packages
from fixflow.pipeline.stream.metrics import Metrics
from streams.prometheus import DASHBOARD, dashboard_panels

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
TARGET_LABELS = {"instance", "job"}
"""Labels Prometheus adds to every scraped series."""


def load_yaml(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def compose() -> dict[str, Any]:
    [document] = load_yaml(DEPLOY / "docker-compose.yml")
    return document


def k8s_objects() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_yaml(path)
    ]


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# ---------------------------------------------------------------- metrics vs dashboard


def registered_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """Family name -> (type, label names) of every metric ``Metrics()`` registers."""
    metrics = Metrics()
    families: dict[str, tuple[str, frozenset[str]]] = {}
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            # prometheus_client keeps the declared labels only here; there is no public getter.
            labels = frozenset(collector._labelnames)
            families[collector._name] = (collector._type, labels)
    assert families, "Metrics() registered nothing: the test would check nothing"
    return families


SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def series_names() -> dict[str, tuple[str, frozenset[str]]]:
    """Every series name Prometheus sees -> (family, label names, with ``le`` for buckets)."""
    names = {}
    for family, (kind, labels) in registered_metrics().items():
        for suffix in SERIES_SUFFIXES[kind]:
            extra = {"le"} if suffix == "_bucket" else set()
            names[family + suffix] = (family, labels | extra)
    return names


def dashboard_targets() -> list[tuple[str, dict[str, Any]]]:
    return [
        (panel["title"], target)
        for panel in dashboard_panels()
        for target in panel.get("targets", [])
    ]


METRIC_NAME = re.compile(r"\bfixflow_[a-zA-Z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


def test_dashboard_is_grafana_json_with_unique_panel_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard_panels()]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for panel in dashboard_panels():
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], f"panel {panel['title']!r} has no query"


def test_every_query_of_the_dashboard_follows_its_instance_variable() -> None:
    """A dashboard over several `fixflow run`s shows the instances picked, in every panel."""
    for title, target in dashboard_targets():
        for name in METRIC_NAME.findall(target["expr"]):
            selector = target["expr"].split(name, 1)[1]
            assert selector.startswith('{instance=~"$instance"'), (title, target["expr"])


def test_every_metric_in_the_dashboard_exists_in_the_registry() -> None:
    known = series_names()
    targets = dashboard_targets()
    assert targets
    for title, target in targets:
        used = METRIC_NAME.findall(target["expr"])
        assert used, f"panel {title!r}: query uses no fixflow metric: {target['expr']}"
        unknown = sorted(set(used) - set(known))
        assert not unknown, (
            f"panel {title!r} queries {unknown}, which pipeline/stream/metrics.py "
            f"does not register (known: {sorted(known)})"
        )


def test_every_label_in_the_dashboard_exists_on_its_metrics() -> None:
    known = series_names()
    for title, target in dashboard_targets():
        expr = target["expr"]
        labels = set(TARGET_LABELS)
        for name in METRIC_NAME.findall(expr):
            labels |= known[name][1]
        used = {
            label.strip()
            for group in GROUPING.findall(expr)
            for label in group.split(",")
            if label.strip()
        }
        used |= set(MATCHER.findall(expr))
        used |= set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
        assert used <= labels, (
            f"panel {title!r} uses labels {sorted(used - labels)} that "
            f"its metrics do not have ({sorted(labels)})"
        )


def test_every_registered_metric_is_on_the_dashboard() -> None:
    shown = {
        known_family
        for _, target in dashboard_targets()
        for name in METRIC_NAME.findall(target["expr"])
        for known_family in [series_names()[name][0]]
    }
    missing = sorted(set(registered_metrics()) - shown)
    assert not missing, f"metrics without a panel in {DASHBOARD.name}: {missing}"


# ---------------------------------------------------------------- YAML files


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_files_parse(path: Path) -> None:
    assert load_yaml(path), f"{path} is empty"


def test_compose_has_the_stack_and_kafka_runs_in_kraft_mode() -> None:
    services = compose()["services"]
    assert {"kafka", "spark-master", "spark-worker", "fixflow", "prometheus", "grafana"} <= set(
        services
    )
    kafka_env = services["kafka"]["environment"]
    assert "controller" in kafka_env["KAFKA_PROCESS_ROLES"]
    assert not any("ZOOKEEPER" in key for key in kafka_env)


def test_compose_files_it_mounts_and_builds_exist() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"service {name} mounts missing {source}"
        build = service.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), f"service {name}: no Dockerfile"


def compose_fixflow_config_path() -> Path:
    service = compose()["services"]["fixflow"]
    command = service["command"]
    mounted = command[command.index("--conf") + 1]
    [source] = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == mounted]
    return DEPLOY / source


def test_compose_fixflow_runs_a_program_of_the_image_with_a_valid_config() -> None:
    command = compose()["services"]["fixflow"]["command"]
    assert command[:2] == ["fixflow", "run"]
    program = command[2]
    assert program.startswith("/app/"), "the image has the repository's examples at /app"
    parse((ROOT / program.removeprefix("/app/")).read_text(encoding="utf-8"), program)
    config = load_config(compose_fixflow_config_path())
    assert config.kafka.bootstrap_servers == "kafka:9092" and not config.kafka.embedded
    assert config.spark.master == "spark://spark-master:7077"
    assert config.spark.conf["spark.driver.host"] == "fixflow"


def test_prometheus_scrapes_the_port_fixflow_serves() -> None:
    port = load_config(compose_fixflow_config_path()).metrics.port
    assert port == MetricsConfig().port == 9464
    [config] = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "fixflow"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets == [f"fixflow:{port}"]
    assert f"{port}:{port}" in compose()["services"]["fixflow"]["ports"]


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards() -> None:
    [datasources] = load_yaml(
        DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
    )
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [providers] = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "fixflow.yml")
    [provider] = providers["providers"]
    grafana_volumes = compose()["services"]["grafana"]["volumes"]
    mounts = dict(v.split(":")[:2] for v in grafana_volumes)
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"


# ---------------------------------------------------------------- Kubernetes


def test_k8s_objects_are_well_formed_and_in_one_namespace() -> None:
    objects = k8s_objects()
    assert {o["kind"] for o in objects} >= {
        "Deployment",
        "ConfigMap",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    }
    for obj in objects:
        assert obj["apiVersion"] and obj["metadata"]["name"]
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "fixflow", obj["metadata"]["name"]
    [kustomization] = load_yaml(DEPLOY / "k8s" / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (DEPLOY / "k8s" / resource).is_file()


def test_k8s_configmap_holds_a_valid_config_and_program() -> None:
    data = k8s_object("ConfigMap", "fixflow-config")["data"]
    config = parse_config(data["cluster.toml"], "configmap.yaml: cluster.toml")
    assert config.spark.master.startswith("k8s://")
    assert config.spark.conf["spark.kubernetes.namespace"] == "fixflow"
    assert config.spark.conf["spark.driver.host"].startswith("fixflow-driver.fixflow.svc")
    parse(data["sssp.dl"], "sssp.dl")


def test_k8s_driver_services_and_config_agree() -> None:
    deployment = k8s_object("Deployment", "fixflow-driver")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    data = k8s_object("ConfigMap", "fixflow-config")["data"]
    config = parse_config(data["cluster.toml"])
    # The files the driver is started with are keys of the mounted ConfigMap.
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "config"]
    args = container["args"]
    for path in (args[2], args[args.index("--conf") + 1]):
        assert path.startswith(mount["mountPath"] + "/")
        assert Path(path).name in data
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == config.metrics.port
    assert ports["driver-rpc"] == int(config.spark.conf["spark.driver.port"])
    assert ports["blockmanager"] == int(config.spark.conf["spark.blockManager.port"])
    assert container["image"] == config.spark.conf["spark.kubernetes.container.image"]
    assert (
        pod["spec"]["serviceAccountName"]
        == config.spark.conf["spark.kubernetes.authenticate.driver.serviceAccountName"]
    )
    labels = pod["metadata"]["labels"]
    for service in ("fixflow-driver", "fixflow-metrics"):
        selector = k8s_object("Service", service)["spec"]["selector"]
        assert selector.items() <= labels.items(), f"Service {service} selects no driver pod"


def test_k8s_metrics_service_is_annotated_for_prometheus() -> None:
    service = k8s_object("Service", "fixflow-metrics")
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    [port] = service["spec"]["ports"]
    assert int(annotations["prometheus.io/port"]) == port["port"] == MetricsConfig().port


def test_cluster_jars_follow_the_pinned_pyspark_and_delta_spark() -> None:
    """The jars a cluster downloads must match the installed (constraints.txt) pyspark: the
    same Spark and Scala for spark-sql-kafka, delta-spark's artifact for that Spark, and
    hadoop-aws of the Hadoop pyspark bundles (a different one fails at the first s3a read)."""
    configs = {
        "conf/cluster.toml": load_config(ROOT / "conf" / "cluster.toml"),
        "deploy/k8s/configmap.yaml": parse_config(
            k8s_object("ConfigMap", "fixflow-config")["data"]["cluster.toml"], "configmap"
        ),
    }
    for where, config in configs.items():
        assert config.spark.conf["spark.jars.packages"] == cluster_packages(), where


# ---------------------------------------------------------------- spark-submit.sh


def test_spark_submit_script_reads_master_and_packages_from_the_config() -> None:
    script = DEPLOY / "spark-submit.sh"
    assert os.access(script, os.X_OK)
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    done = subprocess.run(
        [str(script), "examples/powerlog_p1_sssp.dl", "conf/cluster.toml", "--num-executors", "8"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    cluster = load_config(ROOT / "conf" / "cluster.toml")
    assert words[0] == "spark-submit"
    assert words[words.index("--master") + 1] == cluster.spark.master
    packages = words[words.index("--packages") + 1].replace("\\,", ",")
    assert packages == cluster.spark.conf["spark.jars.packages"]
    assert words[-4:] == ["run", "examples/powerlog_p1_sssp.dl", "--conf", "conf/cluster.toml"]
    assert words[-5].endswith("fixflow/pipeline/cli/__main__.py")
    assert "--num-executors" in words[:-5]


def test_spark_submit_script_stops_on_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[lake]\npath = ""\n')
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    done = subprocess.run(
        [str(DEPLOY / "spark-submit.sh"), "x.dl", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"spark-submit.sh: {bad}: [lake] path must not be empty"


def test_image_entrypoint_runs_other_commands_as_given() -> None:
    script = DEPLOY / "entrypoint.sh"
    assert os.access(script, os.X_OK)
    done = subprocess.run(
        [str(script), "python3", "-c", "import sys; print(sys.argv[1:])", "a b", "c"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['a b', 'c']"


def test_the_image_installs_the_tested_versions() -> None:
    """The Docker image installs with constraints.txt, as `make install` does: the versions
    the suite ran with (z3's verdicts depend on its version)."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and "-c constraints.txt" in installs[0], installs
    assert "constraints.txt" in dockerfile.split(installs[0])[0], "copied before the install"
    assert "!constraints.txt" in ignore.splitlines()
