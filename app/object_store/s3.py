"""The S3 object store: any S3-compatible service (AWS S3, MinIO, Ceph, Garage) via boto3 (EXP-4).

Configuration comes from ``[object_store]``: endpoint URL (empty for AWS),
region, bucket, path-style addressing, and credentials either from the config
file or, when those are empty, from boto3's standard chain (``AWS_ACCESS_KEY_ID``
/ ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, profiles, instance roles).

Retries are ours, not botocore's (botocore is told to try once), so every
retry is counted in the operation's event: throttling (``SlowDown``, 429),
5xx and dropped connections are retried ``max_retries`` times with
exponential backoff and jitter; anything else fails at once. Each request is
retried on its own, so a large upload retries one part, not the object.

``put`` never holds more than one part in memory: a payload that fits in one
part is a single ``PutObject``; a larger one is a multipart upload of
``part_size_bytes`` parts, aborted if any part finally fails (so no
half-object ever appears under the key).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from app.config import ObjectStoreSettings
from app.object_store.events import note_retry
from app.object_store.port import (
    ObjectNotFound,
    ObjectRef,
    ObjectStoreError,
    ObjectStoreUnavailable,
    Payload,
    iter_chunks,
    validate_key,
)
from app.observability import emit

RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
MAX_BACKOFF_SECONDS = 20.0


class S3Body:
    """A ``GetObject`` body as a closeable binary stream."""

    def __init__(self, body: Any):
        self._body = body

    def read(self, size: int = -1) -> bytes:
        return self._body.read(None if size is None or size < 0 else size)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> S3Body:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class S3ObjectStore:
    name = "s3"

    def __init__(
        self,
        settings: ObjectStoreSettings,
        *,
        max_pool_connections: int = 16,
        sleep: Callable[[float], None] = time.sleep,
    ):
        import boto3
        from botocore.config import Config

        self.settings = settings
        self.bucket = settings.bucket
        self._sleep = sleep
        config = Config(
            region_name=settings.region or None,
            signature_version="s3v4",
            s3={"addressing_style": "path" if settings.path_style else "auto"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=settings.connect_timeout_seconds,
            read_timeout=settings.read_timeout_seconds,
            max_pool_connections=max(max_pool_connections, settings.delete_concurrency + 2),
            # Checksums only where the API requires them: S3-compatible services (older
            # MinIO, Ceph, Garage) reject the newer streaming-trailer checksums.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = boto3.session.Session(
            aws_access_key_id=settings.access_key_id or None,
            aws_secret_access_key=settings.secret_access_key or None,
            aws_session_token=settings.session_token or None,
            region_name=settings.region or None,
        )
        self.client = session.client(
            "s3", endpoint_url=settings.endpoint_url or None, config=config
        )

    # -- requests with our retry rule ---------------------------------------------------

    def _call(self, method: str, **params: Any) -> Any:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )

        function = getattr(self.client, method)
        attempt = 0
        while True:
            try:
                return function(**params)
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                retryable = code in RETRYABLE_CODES or status == 429 or status >= 500
                if not retryable:
                    raise
                reason = code or str(status)
            except (
                ConnectionClosedError,
                EndpointConnectionError,
                ReadTimeoutError,
                ConnectTimeoutError,
            ) as exc:
                reason = type(exc).__name__
            if attempt >= self.settings.max_retries:
                raise ObjectStoreUnavailable(
                    f"S3 {method} kept failing after {attempt} retries ({reason})"
                )
            delay = min(MAX_BACKOFF_SECONDS, self.settings.retry_base_ms / 1000.0 * (2**attempt))
            attempt += 1
            note_retry(reason)
            self._sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not a secret

    @staticmethod
    def _is_not_found(exc: Exception) -> bool:
        response = getattr(exc, "response", None) or {}
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return status == 404 or code in {"404", "NoSuchKey", "NotFound"}

    def _client_error(self, method: str, exc: Exception) -> ObjectStoreError:
        response = getattr(exc, "response", None) or {}
        code = response.get("Error", {}).get("Code", "?")
        return ObjectStoreError(f"S3 {method} refused: {code}")

    # -- the port -----------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (tests, benchmarks, first start on MinIO)."""
        from botocore.exceptions import ClientError

        try:
            self._call("head_bucket", Bucket=self.bucket)
        except ClientError as exc:
            if not self._is_not_found(exc):
                raise self._client_error("head_bucket", exc) from None
            params: dict[str, Any] = {"Bucket": self.bucket}
            region = self.settings.region
            if region and region != "us-east-1":
                params["CreateBucketConfiguration"] = {"LocationConstraint": region}
            self._call("create_bucket", **params)

    def put(self, key: str, payload: Payload, content_type: str) -> ObjectRef:
        from botocore.exceptions import ClientError

        validate_key(key)
        part_size = self.settings.part_size_bytes
        digest = hashlib.sha256()
        size = 0
        buffer = bytearray()
        chunks = iter_chunks(payload, chunk_size=min(part_size, 1024 * 1024))
        upload_id: str | None = None
        parts: list[dict[str, Any]] = []
        try:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                buffer += chunk
                while len(buffer) > part_size:
                    if upload_id is None:
                        upload_id = self._call(
                            "create_multipart_upload",
                            Bucket=self.bucket,
                            Key=key,
                            ContentType=content_type,
                        )["UploadId"]
                    part = bytes(buffer[:part_size])
                    del buffer[:part_size]
                    parts.append(self._upload_part(key, upload_id, len(parts) + 1, part))
            if upload_id is None:
                self._call(
                    "put_object",
                    Bucket=self.bucket,
                    Key=key,
                    Body=bytes(buffer),
                    ContentType=content_type,
                )
            else:
                if buffer:
                    parts.append(self._upload_part(key, upload_id, len(parts) + 1, bytes(buffer)))
                self._call(
                    "complete_multipart_upload",
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException as exc:
            if upload_id is not None:
                self._abort(key, upload_id)
            if isinstance(exc, ClientError):
                raise self._client_error("put", exc) from None
            raise
        return ObjectRef(key=key, size=size, sha256=digest.hexdigest(), content_type=content_type)

    def _upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> dict[str, Any]:
        response = self._call(
            "upload_part",
            Bucket=self.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
        )
        return {"PartNumber": number, "ETag": response["ETag"]}

    def _abort(self, key: str, upload_id: str) -> None:
        # Best effort: a bucket lifecycle rule for incomplete uploads is the backstop.
        try:
            self._call("abort_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id)
        except Exception as exc:  # noqa: BLE001 - the original failure is what the caller needs
            emit("ObjectStoreAbortFailed", level=logging.WARNING, error=type(exc).__name__)

    def open(self, key: str) -> BinaryIO:
        from botocore.exceptions import ClientError

        validate_key(key)
        try:
            response = self._call("get_object", Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if self._is_not_found(exc):
                raise ObjectNotFound(key) from None
            raise self._client_error("get_object", exc) from None
        return S3Body(response["Body"])  # type: ignore[return-value]

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        validate_key(key)
        try:
            return self._call("head_object", Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if self._is_not_found(exc):
                return None
            raise self._client_error("head_object", exc) from None

    def delete(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        # S3 answers 204 whether or not the key existed; the settled result must say which.
        if self._head(key) is None:
            return False
        try:
            self._call("delete_object", Bucket=self.bucket, Key=key)
        except ClientError as exc:
            raise self._client_error("delete_object", exc) from None
        return True

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def size(self, key: str) -> int:
        head = self._head(key)
        if head is None:
            raise ObjectNotFound(key)
        return int(head["ContentLength"])

    def url_for(self, key: str, expires: int, *, filename: str | None = None) -> str:
        validate_key(key)
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if filename:
            params["ResponseContentDisposition"] = f'attachment; filename="{filename}"'
        return self.client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=int(expires)
        )

    def close(self) -> None:
        self.client.close()
