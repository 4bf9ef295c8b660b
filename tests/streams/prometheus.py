"""A real Prometheus server (Debian's `prometheus` package, installed by `make test`) scraping
a live `fixflow run` every second, and the Grafana dashboard's panel queries run against it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ports import free_port

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "fixflow.json"
)
WINDOW = "5m"
"""What Grafana's ``$__rate_interval`` and ``$__range`` stand for in the panel queries: the
whole live run, which lasts a minute or two."""


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (HTTP API ``/api/v1/query``)."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(address, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def samples_of(self, expr: str) -> int:
        result = self.query(expr)
        return int(float(result[0]["value"][1])) if result else 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_prometheus(target_port: int, directory: Path) -> Prometheus:
    """Prometheus scraping ``127.0.0.1:target_port`` every second, ready to query."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: `make test` installs Debian's prometheus package"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: fixflow\n    static_configs:\n"
        f'      - targets: ["127.0.0.1:{target_port}"]\n'
    )
    port = free_port()
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(process, f"http://127.0.0.1:{port}", log)
    _wait_ready(server)
    return server


def _wait_ready(server: Prometheus, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {server.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"prometheus not ready in {timeout_s} s: {server.log.read_text()[-2000:]}")


def dashboard_panels() -> Iterator[dict[str, Any]]:
    """Every panel of the Grafana dashboard, those inside collapsed rows included."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    yield from walk(json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"])


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, with the dashboard's variables bound as
    Grafana would bind them: every instance, and ``WINDOW`` for the intervals."""
    bound = {"$instance": ".*", "$__rate_interval": WINDOW, "$__range": WINDOW}
    queries = []
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in bound.items():
                expr = expr.replace(variable, value)
            queries.append((panel["title"], expr))
    return queries
