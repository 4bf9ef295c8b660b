"""Object-store lakes (``[lake] path = "s3://bucket/prefix"``): ``[lake.storage]`` made the
settings of this process, and a check that the store answers before anything runs.

The settings become the standard ``AWS_*`` environment variables. Every S3 client Fixflow
runs reads them: delta-rs (Delta tables), Arrow's S3 filesystem (listing programs and
tables, the program's source), obstore (the lease's conditional writes, the checkpoint
mirror), and Spark's workers, which inherit the driver's environment. One export configures
them all, and a user whose environment already holds the AWS variables needs no section.
Secrets are read from the variable or file a key names, at this point and not before, and
are never logged.

Spark itself never reads or writes the object store: its streaming checkpoint is a local
working copy that ``lake.checkpoint_mirror`` copies to the lake (Spark's S3 connector,
hadoop-aws, is a Maven jar this project cannot assume).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import replace
from datetime import timedelta

from fixflow.pipeline.config import LakeConfig, StorageConfig, named_secret
from fixflow.pipeline.errors import UserFacingError

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 4.0
"""How long the reachability check waits for the store (the issue's bound is 5 s)."""

_CREDENTIALS = ("access_key_id", "secret_access_key", "session_token")


class StorageError(UserFacingError):
    """The lake's object store cannot be used: unreachable, credentials refused, no bucket."""


def use_lake(lake: LakeConfig) -> None:
    """Make ``lake``'s storage settings this process's, then check that the store answers
    (``StorageError`` in one line when it does not). A local lake needs neither."""
    if not lake.remote:
        return
    os.environ.update(storage_environment(lake.storage))
    check_reachable(lake.path, lake.storage)


def use_location(lake: LakeConfig, location: str | None) -> str:
    """``use_lake`` for ``location`` (an output directory, ``--results``, ``--lake``) with
    ``lake``'s storage settings, or for ``lake`` itself when there is none; the location."""
    chosen = location or lake.path
    use_lake(replace(lake, path=chosen))
    return chosen


def storage_environment(storage: StorageConfig) -> dict[str, str]:
    """The ``AWS_*`` variables ``storage`` sets (what it leaves empty stays as it is)."""
    environment = {
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if storage.path_style else "true",
    }
    if storage.endpoint:
        environment["AWS_ENDPOINT_URL"] = storage.endpoint
        if storage.endpoint.startswith("http://"):
            environment["AWS_ALLOW_HTTP"] = "true"
    if storage.region:
        environment["AWS_REGION"] = environment["AWS_DEFAULT_REGION"] = storage.region
    for name in _CREDENTIALS:
        value = named_secret(storage, "[lake.storage]", name, StorageError, required=False)
        if value is not None:
            environment[f"AWS_{name.upper()}"] = value
    return environment


def check_reachable(location: str, storage: StorageConfig) -> None:
    """``StorageError`` unless the object store of ``location`` answers a listing of it
    within ``CHECK_TIMEOUT_S`` with the configured credentials."""
    import obstore
    from obstore.store import from_url

    bucket_url, prefix = split_location(location)
    started = time.monotonic()
    store = from_url(
        bucket_url,
        client_options={
            "timeout": f"{CHECK_TIMEOUT_S:g}s",
            "connect_timeout": "2s",
            # Given client options replace those from the environment: keep plain HTTP.
            "allow_http": os.environ.get("AWS_ALLOW_HTTP") == "true",
        },
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=CHECK_TIMEOUT_S)},
    )
    try:
        next(iter(obstore.list(store, prefix=prefix or None, chunk_size=1)), None)
    except Exception as error:
        raise StorageError(_unusable(location, storage, error)) from None
    log.info("object store of %s answered in %.2f s", location, time.monotonic() - started)


def split_location(location: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → (``s3://bucket``, ``a/b``); ``s3a://`` is read as ``s3://``."""
    scheme, rest = location.split("://", 1)
    bucket, _, prefix = rest.partition("/")
    return f"{'s3' if scheme == 's3a' else scheme}://{bucket}", prefix.strip("/")


_REFUSED_CREDENTIALS = re.compile(
    r"InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|InvalidToken|403 Forbidden"
)


def _unusable(location: str, storage: StorageConfig, error: Exception) -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "AWS S3")
    text = str(error)
    if _REFUSED_CREDENTIALS.search(text):
        why = f"{endpoint} refused the credentials ({_credential_sources(storage)})"
    elif "NoSuchBucket" in text:
        why = f"the bucket {split_location(location)[0]} does not exist at {endpoint}: create it"
    elif re.search(r"error sending request|onnection refused|dns error|timed out", text):
        why = f"cannot reach {endpoint}: check [lake.storage] endpoint and the network"
    else:
        why = text.splitlines()[0][:300] if text else type(error).__name__
    return f"the lake {location} cannot be used: {why}"


def _credential_sources(storage: StorageConfig) -> str:
    """Where the key and secret came from (never what they are)."""
    sources = []
    for name in _CREDENTIALS[:2]:
        file = getattr(storage, f"{name}_file")
        source = file or f"${getattr(storage, f'{name}_env')}"
        sources.append(f"{name.replace('_', ' ')} from {source}")
    return ", ".join(sources)
