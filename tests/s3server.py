"""A real S3 server on loopback for the object-store lake tests: SeaweedFS (the ``weed``
binary the durable broker already ships), with credentials required, one bucket, and the
``[lake.storage]`` section and environment a Fixflow process needs to reach it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from fixflow.pipeline.broker.store import free_port_pairs, weed_binary

ACCESS_KEY = "fixflow-test-key"
SECRET_KEY = "fixflow-test-secret-9f2c"
BUCKET = "lake"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str = BUCKET

    def url(self, path: str) -> str:
        return f"s3://{self.bucket}/{path}"

    @property
    def credentials(self) -> dict[str, str]:
        """The variables ``storage_section`` names, with the server's key and secret."""
        return {"TEST_S3_KEY": ACCESS_KEY, "TEST_S3_SECRET": SECRET_KEY}

    @property
    def environment(self) -> dict[str, str]:
        """What a Fixflow process needs: this one's environment and the credentials."""
        return {**os.environ, **self.credentials}

    def storage_section(self, **keys: str) -> str:
        """``[lake.storage]`` for this server (``keys`` override a line)."""
        lines = {
            "endpoint": f'"{self.endpoint}"',
            "access_key_id_env": '"TEST_S3_KEY"',
            "secret_access_key_env": '"TEST_S3_SECRET"',
            **keys,
        }
        return "[lake.storage]\n" + "".join(f"{k} = {v}\n" for k, v in lines.items())

    def filesystem(self) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(
            endpoint_override=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY
        )

    def files(self, prefix: str) -> list[str]:
        """Every object under ``bucket/prefix``."""
        selector = pafs.FileSelector(
            f"{self.bucket}/{prefix}", recursive=True, allow_not_found=True
        )
        return [
            info.path
            for info in self.filesystem().get_file_info(selector)
            if info.type == pafs.FileType.File
        ]


@contextmanager
def s3_server(directory: Path) -> Iterator[S3Server]:
    """SeaweedFS on free loopback ports, data in ``directory``, credentials required."""
    master, volume, filer, s3 = free_port_pairs(4)
    identities = {
        "identities": [
            {
                "name": "fixflow",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    config = directory / "s3.json"
    directory.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(identities))
    command = [
        weed_binary(), "server", f"-dir={directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-volume.port={volume}", "-filer", f"-filer.port={filer}",
        "-s3", f"-s3.port={s3}", f"-s3.config={config}", "-s3.port.iceberg=0",
        "-s3.port.lance=0", "-volume.max=0", "-master.volumeSizeLimitMB=64",
        "-volume.preStopSeconds=0", "-master.telemetry=false",
    ]  # fmt: skip
    with (directory / "weed.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = S3Server(f"http://127.0.0.1:{s3}")
    try:
        _create_bucket(server, process, directory / "weed.log")
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _create_bucket(server: S3Server, process: subprocess.Popen[bytes], log: Path) -> None:
    """Once the S3 gateway answers (an unsigned request is refused: it is up), the bucket."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            urllib.request.urlopen(server.endpoint, timeout=2)
        except urllib.error.HTTPError:
            break  # 403 to an anonymous request: the gateway is up, with credentials
        except OSError:
            time.sleep(0.3)
    else:
        raise RuntimeError(f"SeaweedFS did not come up: {log.read_text(errors='replace')}")
    for _ in range(50):  # the filer may still be joining the master
        try:
            filesystem = pafs.S3FileSystem(
                endpoint_override=server.endpoint,
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
                allow_bucket_creation=True,
            )
            filesystem.create_dir(server.bucket)
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"could not create the bucket: {log.read_text(errors='replace')[-2000:]}")
