"""Which page answers which path."""

from __future__ import annotations

from .actions import action_post, confirm_page
from .compare import compare_page
from .conversation import conversation_page
from .listing import conversations_page, user_search_page
from .longterm import file_page, namespace_page, namespaces_page
from .request import request_page, search_page
from .web import Handler

ROUTES: dict[str, Handler] = {
    "/": conversations_page,
    "/search/user": user_search_page,
    "/conversation": conversation_page,
    "/request": request_page,
    "/search": search_page,
    "/compare": compare_page,
    "/memory": namespaces_page,
    "/memory/namespace": namespace_page,
    "/memory/file": file_page,
    "/confirm": confirm_page,
}
WRITE_ROUTES: dict[str, Handler] = {"/action": action_post}
