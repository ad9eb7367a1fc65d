"""Memory files in the S3 store's bucket: per namespace, one head object (the file index and
the version log) swapped with conditional writes, and immutable content objects.

Under the store's prefix: ``memory/<digest>/head.json`` and ``memory/<digest>/blobs/<id>``
(a user's namespace: under ``memory/scopes/<scope>/<digest>/``, see
:meth:`~chat_memory.backends.s3.layout.Layout.namespace_root`).
A commit uploads the new contents as fresh objects (``If-None-Match: *``), then replaces
the head with ``If-Match: <ETag>`` (``If-None-Match: *`` for a new namespace) only if every
file it expects is still at the revision it read; a 412 means another writer won: the
uploads are deleted and the command re-reads and retries. Contents no head refers to any
more (versions dropped past the count or byte budget) are deleted after the swap. Each log
entry records its content's size (``[path, revision, blob, at, bytes]``); an entry written
before that is sized once, with a HEAD request, by the next commit that keeps it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..backends.failures import stored_data
from ..backends.s3.client import S3_DRIVER_ERRORS, is_conflict, is_missing
from ..backends.s3.lifecycle import refuse_if_erasing
from ..lifecycle.keys import is_scoped
from .budget import live_limits_hold, versions_to_keep
from .files import FileEntry, FileVersion, MemoryFiles, StoredFile
from .paths import placement_holds


class S3Files(MemoryFiles):
    """One namespace in the bucket of an :class:`~chat_memory.backends.s3.S3Store`."""

    driver_errors = S3_DRIVER_ERRORS
    keeps_retention = True

    def __init__(self, store: Any, namespace: str, **options: Any) -> None:
        super().__init__(namespace, **options)
        self.store = store
        self.client, self.bucket = store.client, store.bucket
        self._root = store.layout.namespace_root(self.namespace)

    def _head(self) -> tuple[dict[str, Any], str | None]:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=f"{self._root}head.json")
        except Exception as exc:
            if is_missing(exc):
                return {"namespace": self.namespace, "revision": 0, "files": {}, "log": []}, None
            raise
        body = response["Body"].read()
        with stored_data(f"S3 object {self._root}head.json"):
            head: dict[str, Any] = json.loads(body)
        return head, response["ETag"]

    def _blob(self, key: str) -> str:
        body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body.decode("utf-8")

    def _listing(self) -> dict[str, FileEntry]:
        head, _ = self._head()
        return {
            path: FileEntry(path, size, rev) for path, (rev, size, _key) in head["files"].items()
        }

    def _read(self, path: str) -> StoredFile | None:
        head, _ = self._head()
        found = head["files"].get(path)
        if found is None:
            return None
        try:
            return StoredFile(path, self._blob(found[2]), found[0])
        except Exception as exc:
            if is_missing(exc):  # replaced and collected meanwhile: the caller re-reads
                return None
            raise

    def _commit(self, expected: Mapping[str, int | None], writes: Mapping[str, str | None]) -> bool:
        head, etag = self._head()
        files: dict[str, list[Any]] = head["files"]
        if any((files[p][0] if p in files else None) != rev for p, rev in expected.items()):
            return False
        if not placement_holds(files, writes):
            return False
        limits = self.limits
        new_sizes = {p: None if c is None else len(c.encode("utf-8")) for p, c in writes.items()}
        if not live_limits_hold(
            {p: f[1] for p, f in files.items()},
            new_sizes,
            limits.max_files,
            limits.max_namespace_bytes,
        ):
            return False
        sizes_of_blobs = {f[2]: f[1] for f in files.values()}
        revision = head["revision"] + 1
        now = datetime.now(timezone.utc).isoformat()
        uploaded: list[str] = []
        log = list(head["log"])
        for path, content in writes.items():
            if content is None:
                files.pop(path, None)
                log.append([path, revision, None, now, 0])
                continue
            key = f"{self._root}blobs/{uuid.uuid4().hex}"
            data = content.encode("utf-8")
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            uploaded.append(key)
            files[path] = [revision, len(data), key]
            log.append([path, revision, key, now, len(data)])
        newest_first = (self._logged_size(entry, sizes_of_blobs) for entry in reversed(log))
        count, _ = versions_to_keep(
            newest_first, len(writes), limits.max_versions, limits.version_bytes
        )
        kept, dropped = log[len(log) - count :], log[: len(log) - count]
        new_head = {
            "namespace": self.namespace,
            "revision": revision,
            "files": files,
            "log": kept,
            # what memory.sweep() reads (docs/lifecycle.md): this writer's retention, and when
            "retention_seconds": self.retention_seconds,
            "written_at": now,
        }
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=f"{self._root}head.json",
                Body=json.dumps(new_head).encode("utf-8"),
                ContentType="application/json",
                **condition,
            )
        except Exception as exc:
            if is_conflict(exc) or (etag is not None and is_missing(exc)):
                self._delete(uploaded)
                return False
            raise
        if etag is None and is_scoped(self.namespace):
            refuse_if_erasing(self.store, self.namespace, self._root)
        live = {entry[2] for entry in kept if entry[2]} | {f[2] for f in files.values()}
        self._delete([entry[2] for entry in dropped if entry[2] and entry[2] not in live])
        return True

    def _logged_size(self, entry: list[Any], sizes_of_blobs: Mapping[str, int]) -> int:
        """Content bytes of a log entry, recorded in it since the byte budget exists (an
        older entry's is looked up once, and recorded by the commit that keeps it)."""
        if len(entry) < 5:
            key = entry[2]
            size = 0 if key is None else sizes_of_blobs.get(key)
            if size is None:
                try:
                    size = int(
                        self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
                    )
                except Exception as exc:
                    if not is_missing(exc):
                        raise
                    size = 0  # collected meanwhile: nothing of it is stored
            entry.append(size)
        return int(entry[4])

    def stored_bytes(self) -> tuple[int, int]:
        """(content bytes of the current files, of the kept versions), as the head records them."""
        head, _ = self._head()
        return sum(f[1] for f in head["files"].values()), sum(
            e[4] if len(e) > 4 else 0 for e in head["log"]
        )

    def _delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=key)
            except Exception:  # best effort: an orphan costs storage, never correctness
                pass

    def _versions(self, path: str) -> list[FileVersion]:
        head, _ = self._head()
        versions = []
        for logged_path, revision, key, at, *_size in head["log"]:
            if logged_path == path:
                content = None if key is None else self._blob(key)
                versions.append(FileVersion(path, revision, content, datetime.fromisoformat(at)))
        return versions

    def _drop(self) -> None:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._root):
            self._delete([item["Key"] for item in page.get("Contents", [])])

    def namespaces(self) -> list[str]:
        """Every namespace holding files."""
        prefix = f"{self.store.layout.prefix}memory/"
        names = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if item["Key"].endswith("/head.json"):
                    response = self.client.get_object(Bucket=self.bucket, Key=item["Key"])
                    body = response["Body"].read()
                    with stored_data(f"S3 object {item['Key']}"):
                        head = json.loads(body)
                        if head["files"]:
                            names.append(head["namespace"])
        return sorted(names)
