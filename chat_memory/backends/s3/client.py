"""Connecting to S3: the URL, the boto3 client, the bucket, and reading botocore errors.

boto3 is imported only here and only when a client has to be built, so that the rest of
chat-memory works without the ``s3`` extra.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import unquote, urlsplit

from ...errors import ConfigurationError
from ..failures import DriverErrors
from ..urls import redact_url, strip_userinfo

#: What the S3 stores turn into StorageError: botocore's errors (a connection, a timeout, a
#: bad answer: BotoCoreError; an error the server answered: ClientError) and boto3's own.
S3_DRIVER_ERRORS: DriverErrors = (
    "botocore.exceptions:BotoCoreError",
    "botocore.exceptions:ClientError",
    "boto3.exceptions:Boto3Error",
)

#: Codes S3 answers a conditional write with when another writer got there first.
CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
MISSING_BUCKET_CODES = frozenset({"NoSuchBucket", "404", "NotFound"})

# one boto3 session for the process (loading the service model takes a tenth of a second per
# session); a session is not thread-safe, so clients are created under a lock
_session: Any = None
_session_lock = threading.Lock()


def parse_location(url: str) -> tuple[str, str, str]:
    """Split an ``s3://bucket/prefix?query`` URL into (bucket, prefix, query string)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "s3":
        raise ConfigurationError(f"S3 store URL ({redact_url(url)!r}) must start with s3://")
    bucket = parts.netloc
    if len(bucket) < 3 or "@" in bucket:
        raise ConfigurationError(
            f"S3 store URL ({redact_url(url)!r}) must name a bucket of 3 or more characters: s3://bucket/prefix"
        )
    return bucket, unquote(parts.path), parts.query


def make_client(
    endpoint_url: str | None = None,
    region_name: str | None = None,
    addressing_style: str | None = None,
    max_attempts: int = 5,
) -> Any:
    """A boto3 S3 client. Credentials, and the region when not given, come from the usual
    AWS chain (environment, shared config, instance role), except that an ``endpoint_url``
    with user information (``http://ACCESS_KEY:SECRET@minio:9000``, the way S3-compatible
    servers are often written) gives the access key id and secret, which then win over the
    chain; they are taken out of the endpoint before botocore sees it, so that no error,
    chained exception or botocore log shows them. Server errors and throttling are retried by
    botocore's ``standard`` mode, at most ``max_attempts`` tries in all."""
    credentials: dict[str, str] = {}
    if endpoint_url:
        endpoint_url, credentials = endpoint_credentials(endpoint_url)
    try:
        import boto3
        from botocore.config import Config
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"the driver for s3:// is missing ({exc.name}); pip install 'chat-memory[s3]'"
        ) from exc
    if addressing_style is None and endpoint_url:
        # self-hosted endpoints (MinIO, moto, an IP) rarely resolve bucket subdomains
        addressing_style = "path"
    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        s3={"addressing_style": addressing_style} if addressing_style else None,
    )
    global _session
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            "s3", endpoint_url=endpoint_url, region_name=region_name, config=config, **credentials
        )


def endpoint_credentials(endpoint_url: str) -> tuple[str, dict[str, str]]:
    """``(endpoint without user information, boto3 credential keywords)``: ``user:secret@``
    is an access key id and its secret access key; a user name alone is refused (a secret
    without its key id, or the reverse, cannot sign a request)."""
    bare, user, secret = strip_userinfo(endpoint_url)
    if user is None and secret is None:
        return endpoint_url, {}
    if not user or not secret:
        raise ConfigurationError(
            f"S3 endpoint_url ({redact_url(endpoint_url)!r}) must give both the access key id and the secret "
            "(http://KEY_ID:SECRET@host:port), or neither (credentials from the AWS chain)"
        )
    return bare, {"aws_access_key_id": user, "aws_secret_access_key": secret}


def error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (None for anything else)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    if code:
        return str(code)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(status) if status else None


def is_conflict(exc: BaseException) -> bool:
    """A conditional write lost its race (412 PreconditionFailed, 409 ConditionalRequestConflict)."""
    return error_code(exc) in CONFLICT_CODES or error_code(exc) == "412"


def was_retried(exc: BaseException) -> bool:
    """botocore sent the request more than once (after a 5xx or a connection error), so an
    earlier attempt may have been applied by the server even though its answer was lost."""
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def is_missing(exc: BaseException) -> bool:
    """The object does not exist."""
    return error_code(exc) in MISSING_CODES


def ensure_bucket(client: Any, bucket: str) -> None:
    """Create the bucket unless it exists; another process creating it at the same moment is fine."""
    try:
        client.head_bucket(Bucket=bucket)
        return
    except Exception as exc:
        if error_code(exc) not in MISSING_BUCKET_CODES:
            raise
    region = client.meta.region_name
    options: dict[str, Any] = {}
    if region and region != "us-east-1":
        options["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(Bucket=bucket, **options)
    except Exception as exc:
        code = error_code(exc)
        if code == "BucketAlreadyOwnedByYou":
            return
        if code == "BucketAlreadyExists":
            client.head_bucket(Bucket=bucket)  # raises (403) when somebody else owns it
            return
        raise
