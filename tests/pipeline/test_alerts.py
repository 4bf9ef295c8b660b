"""The shipped Prometheus alert rules (deploy/prometheus/alerts.yml), checked and unit-tested
by Debian's promtool (`make test` installs the `prometheus` package): each alert fires on the
series it is for and not on a healthy neighbour (alerts_test.yml), the Prometheus config that
loads them is valid, and every metric they use is one the pipeline registers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from test_deploy import METRIC_NAME, series_names

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make test` installs Debian's prometheus package"
    return subprocess.run(
        [tool, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS_DIR
    )


def alert_rules() -> list[dict[str, str]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_are_valid() -> None:
    done = promtool("check", "rules", ALERTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_when_it_should_and_only_then() -> None:
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test() -> None:
    tests = yaml.safe_load((PROMETHEUS_DIR / "alerts_test.yml").read_text(encoding="utf-8"))
    tested = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {rule["alert"] for rule in alert_rules()}


def test_the_prometheus_config_loads_the_rules() -> None:
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 rules found" in done.stdout + done.stderr


def test_alerts_use_only_registered_metrics() -> None:
    known = series_names()
    for rule in alert_rules():
        used = set(METRIC_NAME.findall(rule["expr"]))
        assert used <= set(known), (rule["alert"], sorted(used - set(known)))
