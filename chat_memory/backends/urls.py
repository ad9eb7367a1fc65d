"""Store URLs as they may be shown: credentials taken out (rules in docs/security.md).

Drivers do not agree on where a password ends. SQLAlchemy's URL pattern takes everything
from the first ``:`` after the user name to the next ``@``, ``#``, ``?`` and ``/`` included
(``postgresql+psycopg://u:Real#Pass?1@h/db`` connects with the password ``Real#Pass?1``);
``urllib`` (redis-py, botocore) ends the authority at the first ``/``, ``?`` or ``#`` and
the user information at the last ``@`` before that. A person who writes an unencoded ``@``
in a password means all of it. So the mask runs from the first ``:`` after the user name to
the last ``@`` that is followed by something shaped like a host: every reading a driver or a
person may make of the password is inside it. Hiding a little too much (an ``@`` in a query
option of a URL that has a password) beats showing a password.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# what may follow the "@" that ends the user information: a host (or [IPv6]), an optional
# port, then the end or a path, query or fragment
_HOST_AFTER = re.compile(r"(?:\[[^\]/?#@]*\]|[^/?#@:\[\]\s]*)(?::\d*)?(?:[/?#]|$)")
# Query option names whose values are secrets, matched anywhere in the lower-cased name:
# password=, passwd=, pwd=, sslpassword=, aws_secret_access_key=, aws_session_token=,
# x-amz-security-token=, x-amz-signature=, api_key=, access_key=, client_secret=, ...
_SECRET_OPTION = re.compile(
    r"pass(word|wd|phrase)?$|password|passwd|passphrase|pwd|secret|token|credential|api[_-]?key|apikey"
    r"|access[_-]?key|private[_-]?key|signature|auth|jwt|bearer|cookie|session[_-]?key|sas$|sig$"
)
#: free text keeps a known secret (or a piece of one) shorter than this: replacing a one- or
#: two-character string everywhere would garble messages without protecting anything real
MIN_SECRET_IN_TEXT = 3
# where a driver may cut a password that holds these characters unencoded: a message may
# then show one piece (redis-py: "Port could not be cast to integer value as 'Real'")
_PIECES = re.compile(r"[@/?#:&]")
#: a URL inside free text (an error message, a log line)
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def is_secret_option(name: str) -> bool:
    """Whether a URL query option of this name carries a secret (case-insensitive)."""
    return bool(_SECRET_OPTION.search(unquote(name).lower()))


def password_span(url: str) -> tuple[int, int] | None:
    """Where the password of ``url`` is: ``(start, end)`` indexes of the text between the
    ``:`` after the user name and the ``@`` before the host, as every driver may read it
    (see the module docstring); None when the URL has no password. A URL whose ``@`` is
    followed by nothing host-like (malformed) gets everything between ``://`` and its last
    ``@``."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return None
    start = scheme.end()
    # the user name ends at the first ":"; both SQLAlchemy and urllib refuse a "/" in it
    user = re.match(r"[^:/]*", url[start:])
    colon = start + (user.end() if user else 0)
    if colon >= len(url) or url[colon] != ":":
        return None
    ats = [i for i in range(colon + 1, len(url)) if url[i] == "@"]
    if not ats:
        return None
    hosted = [i for i in ats if _HOST_AFTER.match(url, i + 1)]
    if hosted:
        return colon + 1, hosted[-1]
    return start, ats[-1]  # malformed: everything between "://" and the last "@"


def redact_url(url: str) -> str:
    """``url`` with its password and secret query options replaced by ``***``, for headers,
    logs, reprs and error messages: ``postgresql+psycopg://postgres:hunter2@h/db`` becomes
    ``postgresql+psycopg://postgres:***@h/db``, ``redis://:pw@h`` becomes ``redis://:***@h``,
    ``postgresql+psycopg://u:Real#Pass?1@h/db`` becomes ``postgresql+psycopg://u:***@h/db``,
    ``s3://b/p?aws_secret_access_key=x`` becomes ``s3://b/p?aws_secret_access_key=***``, and a
    URL inside an option (``endpoint_url=http://u:pw@h``) is redacted too. User names, hosts,
    paths and other options are kept as written."""
    text = str(url)
    span = password_span(text)
    rest_from = 0
    if span is not None:
        start, end = span
        if end > start or text[start - 1] != ":":
            text = f"{text[:start]}{MASK}{text[end:]}"
            rest_from = start + len(MASK)
        else:
            rest_from = end
    query_at = text.find("?", rest_from)
    if query_at < 0:
        return text
    return text[: query_at + 1] + "&".join(
        _redact_option(part) for part in text[query_at + 1 :].split("&")
    )


def _redact_option(option: str) -> str:
    name, equals, value = option.partition("=")
    if not (equals and value):
        return option
    if is_secret_option(name):
        # SQLAlchemy reads "#" as part of a query value: the mask runs to the next "&"
        return f"{name}={MASK}"
    decoded = unquote(value)
    if "://" in decoded:
        redacted = redact_url(decoded)
        if redacted != decoded:
            return f"{name}={redacted}"
    return option


def url_secrets(url: str) -> list[str]:
    """Every secret string ``url`` holds, longest first: its password (as written, decoded,
    and the pieces a driver may cut it into at ``@ / ? # : &``), its secret query options'
    values, and those of a URL given inside an option. For :func:`redact_message`."""
    found: set[str] = set()
    text = str(url)
    span = password_span(text)
    if span is not None:
        _add_secret(found, text[span[0] : span[1]])
        query_from = span[1]
    else:
        query_from = 0
    query_at = text.find("?", query_from)
    if query_at >= 0:
        for option in text[query_at + 1 :].split("&"):
            name, equals, value = option.partition("=")
            if equals and value and is_secret_option(name):
                _add_secret(found, value)
            elif equals and "://" in unquote(value):
                found.update(url_secrets(unquote(value)))
    return sorted(found, key=lambda s: (-len(s), s))


def _add_secret(found: set[str], raw: str) -> None:
    for form in {raw, unquote(raw)}:
        for piece in [form, *_PIECES.split(form)]:
            if len(piece) >= MIN_SECRET_IN_TEXT:
                found.add(piece)


def redact_message(text: str, urls: Iterable[str | None] = ()) -> str:
    """``text`` (an error message, a log line, a driver's complaint) with the secrets of the
    given store ``urls`` (:func:`url_secrets`) replaced by ``***`` wherever they appear, and
    every URL inside it passed through :func:`redact_url`."""
    message = str(text)
    secrets = sorted(
        {s for url in urls if url for s in url_secrets(url)}, key=lambda s: (-len(s), s)
    )
    for secret in secrets:
        message = message.replace(secret, MASK)
    return URL_IN_TEXT.sub(lambda match: redact_url(match.group()), message)


def strip_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without user information, user, password)`` (both decoded; None when absent),
    for an endpoint whose credentials must not travel in the URL."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return url, None, None
    start = scheme.end()
    span = password_span(url)
    if span is not None and url[span[0] - 1] == ":":
        user = url[start : span[0] - 1]
        return (
            url[:start] + url[span[1] + 1 :],
            unquote(user) if user else None,
            unquote(url[span[0] : span[1]]),
        )
    if span is not None:  # malformed: no telling user from password
        return url[:start] + url[span[1] + 1 :], None, unquote(url[span[0] : span[1]])
    authority = re.match(r"[^/?#]*", url[start:])
    at = authority.group().rfind("@") if authority else -1
    if at < 0:
        return url, None, None
    return url[:start] + url[start + at + 1 :], unquote(url[start : start + at]) or None, None


__all__ = [
    "MASK",
    "URL_IN_TEXT",
    "is_secret_option",
    "password_span",
    "redact_message",
    "redact_url",
    "strip_userinfo",
    "url_secrets",
]
