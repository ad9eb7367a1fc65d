"""Store URLs as they may be shown: credentials taken out."""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# ``scheme://user:password@``. A password may hold an unencoded "/" (SQLAlchemy accepts it),
# so when the authority-only form does not match, the password runs to the last "@" before
# the query: hiding a little too much beats showing a password.
_USERINFO = (
    re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@]*):(?P<password>[^/?#]*)@"),
    re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@]*):(?P<password>[^?#]*)@"),
)
# Query option names whose values are secrets (password=, sslpassword=, aws_secret_access_key=,
# token=, x-amz-security-token=, api_key=, ...); matched anywhere in the lower-cased name.
_SECRET_OPTION = re.compile(
    r"pass(word|wd)?$|password|pwd|secret|token|credential|api[_-]?key|access[_-]?key|private[_-]?key|signature|auth"
)


def redact_url(url: str) -> str:
    """``url`` with its password and secret query options replaced by ``***``, for headers,
    logs and error messages: ``postgresql+psycopg://postgres:hunter2@h/db`` becomes
    ``postgresql+psycopg://postgres:***@h/db``, ``redis://:pw@h`` becomes ``redis://:***@h``,
    ``s3://b/p?aws_secret_access_key=x`` becomes ``s3://b/p?aws_secret_access_key=***``.
    User names, hosts, paths and other options are kept as written."""
    text = str(url)
    for pattern in _USERINFO:
        match = pattern.match(text)
        if match:
            if match.group("password"):
                text = f"{match.group('head')}:{MASK}@{text[match.end():]}"
            break
    query_at = text.find("?")
    if query_at < 0:
        return text
    query, hash_mark, fragment = text[query_at + 1 :].partition("#")
    return text[: query_at + 1] + "&".join(_redact_option(part) for part in query.split("&")) + hash_mark + fragment


def _redact_option(option: str) -> str:
    name, equals, value = option.partition("=")
    if equals and value and _SECRET_OPTION.search(unquote(name).lower()):
        return f"{name}={MASK}"
    return option


__all__ = ["redact_url"]
