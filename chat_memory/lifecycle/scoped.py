"""The scoped view of a store: what :meth:`ChatMemory.for_user <chat_memory.ChatMemory.for_user>`
gives its bound memory instead of the store itself (docs/lifecycle.md, "Scope and the scoped key").

Every method of the store protocol and of its abilities (the classes of
:mod:`chat_memory.backends.base`) is forwarded with each argument named ``conversation_id``
(or ending in ``_conversation_id``) turned into the scope's key, an argument named ``scope``
replaced by the view's own scope, and what comes back turned around (a snapshot's, a record's
or a listed key's conversation id back to the bare id). So everything the bound memory does —
and every ability added later that follows the naming rule — stays inside the scope by
construction. The sync view subclasses the same abilities as the store (``isinstance`` answers
as on the store); the async view offers the same methods by name, as async stores do."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from abc import ABC
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

from ..backends import base
from ..backends.aio import AsyncStore
from ..backends.base import MAX_CONVERSATION_ID_LENGTH, Snapshot, Store, check_conversation_id
from ..errors import ConfigurationError, InvalidInputError
from .keys import Scope, ScopedKey, scoped_key
from .records import ConversationRecord

#: Store methods that take no conversation and are the store's own business, not forwarded
_NOT_FORWARDED = frozenset(
    {"from_url", "extra_for", "node_target", "url_settings", "close", "conversations"}
)


#: "every conversation of the scope" for the plain ``conversations()`` listing
_ALL = 1 << 31


def _protocol_classes() -> list[type]:
    """:class:`Store` and its abilities: the ABCs :mod:`chat_memory.backends.base` defines."""
    return [
        value
        for value in vars(base).values()
        if isinstance(value, type)
        and issubclass(value, ABC)
        and value.__module__ == base.__name__
        and value is not ABC
    ]


@functools.cache
def protocol_signatures() -> dict[str, inspect.Signature]:
    """Each protocol method by name, its signature without ``self`` (where two classes declare
    one name, the one taking more arguments: an ability's ``append`` takes ``check``)."""
    found: dict[str, inspect.Signature] = {}
    for cls in _protocol_classes():
        for name, value in vars(cls).items():
            if name.startswith("_") or name in _NOT_FORWARDED or not inspect.isfunction(value):
                continue
            signature = inspect.signature(value)
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
            if name not in found or len(signature.parameters) > len(found[name].parameters):
                found[name] = signature
    return found


def _is_id_parameter(name: str) -> bool:
    return name == "conversation_id" or name.endswith("_conversation_id")


class _Scoping:
    """The translation both views share."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.prefix = scope.prefix

    def key(self, conversation_id: Any) -> ScopedKey:
        bare = check_conversation_id(conversation_id)
        key = scoped_key(self.scope, bare)
        if len(key) > MAX_CONVERSATION_ID_LENGTH:
            raise InvalidInputError(
                f"conversation_id ({bare[:40]!r}…) is too long for scope "
                f"(user {self.scope.user!r}, app {self.scope.app!r}): at most "
                f"{MAX_CONVERSATION_ID_LENGTH - len(self.prefix)} characters"
            )
        return key

    def arguments(self, signature: inspect.Signature, args: Any, kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if _is_id_parameter(name):
                bound.arguments[name] = self.key(value)
            elif name == "scope":
                bound.arguments[name] = self.prefix
            elif callable(value):
                bound.arguments[name] = self._calling_back(value)
        return bound

    def _calling_back(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """A callback the store calls (a planner, a check) sees bare ids, as it would unscoped."""

        def call(*args: Any, **kwargs: Any) -> Any:
            return function(*(self.back(a) for a in args), **kwargs)

        return call

    def back(self, value: Any) -> Any:
        """What the store returned, with this scope's keys turned back into bare ids."""
        if isinstance(value, str):
            return str(value[len(self.prefix) :]) if value.startswith(self.prefix) else value
        if isinstance(value, (Snapshot, ConversationRecord)):
            return dataclasses.replace(value, conversation_id=self.back(value.conversation_id))
        if isinstance(value, tuple):
            return tuple(self.back(v) for v in value)
        if isinstance(value, list) and value and isinstance(value[0], (str, ConversationRecord)):
            return [self.back(v) for v in value]
        return value

    def bare_ids(self, keys: list[str]) -> list[str]:
        return [str(k[len(self.prefix) :]) for k in keys if k.startswith(self.prefix)]


def _copy_attributes(view: Any, inner: Any, classes: tuple[type, ...]) -> None:
    """The settings an engine reads off a store (archive cap, flags), from the wrapped one."""
    for cls in classes:
        for name, value in vars(cls).items():
            if not name.startswith("_") and not callable(value) and not isinstance(value, property):
                if hasattr(inner, name):
                    setattr(view, name, getattr(inner, name))


class ScopedStore(Store):
    """The sync scoped view (built by :func:`scoped_view`, with the wrapped store's abilities)."""

    def __init__(self, store: Store, scope: Scope) -> None:
        self.store = store
        self._scoping = _Scoping(scope)
        self.scope = scope
        _copy_attributes(self, store, (Store,))

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Store:
        raise ConfigurationError("a scoped view is made by memory.for_user(...), not from a URL")

    def conversations(self) -> list[str]:
        """The scope's conversation ids (bare), sorted."""
        listed = getattr(self.store, "list_conversations", None)
        if callable(listed):
            records = listed(self._scoping.prefix, None, 0, _ALL)
            return sorted(self._scoping.back(r.conversation_id) for r in records)
        return sorted(self._scoping.bare_ids(self.store.conversations()))

    def close(self) -> None:
        """Nothing: the view does not own the store."""

    def __repr__(self) -> str:
        return f"ScopedStore({self.store!r}, {self.scope!r})"


def _sync_forwarder(name: str, signature: inspect.Signature) -> Callable[..., Any]:
    def forward(self: ScopedStore, *args: Any, **kwargs: Any) -> Any:
        bound = self._scoping.arguments(signature, args, kwargs)
        return self._scoping.back(getattr(self.store, name)(*bound.args, **bound.kwargs))

    forward.__name__ = forward.__qualname__ = name
    return forward


@functools.cache
def _view_class(store_class: type[Store]) -> type[ScopedStore]:
    abilities = tuple(
        cls for cls in _protocol_classes() if cls is not Store and issubclass(store_class, cls)
    )
    namespace: dict[str, Any] = {
        name: _sync_forwarder(name, signature)
        for name, signature in protocol_signatures().items()
        if callable(getattr(store_class, name, None))
    }
    return cast(
        "type[ScopedStore]",
        type(f"Scoped{store_class.__name__}", (ScopedStore, *abilities), namespace),
    )


def scoped_view(store: Store, scope: Scope) -> ScopedStore:
    """``store`` seen from inside ``scope`` (see the module's docstring)."""
    if isinstance(store, ScopedStore):
        raise ConfigurationError(
            f"store ({store!r}) is already scoped: scopes do not nest (use the unbound memory)"
        )
    return _view_class(type(store))(store, scope)


class AsyncScopedStore(AsyncStore):
    """The async scoped view (built by :func:`async_scoped_view`); optional abilities are
    offered by name when the wrapped store has them, as on every async store."""

    def __init__(self, store: AsyncStore, scope: Scope) -> None:
        self.store = store
        self._scoping = _Scoping(scope)
        self.scope = scope
        _copy_attributes(self, store, (AsyncStore, type(store)))

    def __getattr__(self, name: str) -> Any:
        # only for names not defined here: an optional ability's coroutine, found by name
        signature = protocol_signatures().get(name)
        target = getattr(self.__dict__.get("store"), name, None)
        if signature is None or not callable(target):
            raise AttributeError(name)
        return self._forward(name, signature)

    def _forward(self, name: str, signature: inspect.Signature) -> Callable[..., Awaitable[Any]]:
        async def forward(*args: Any, **kwargs: Any) -> Any:
            bound = self._scoping.arguments(signature, args, kwargs)
            result = await getattr(self.store, name)(*bound.args, **bound.kwargs)
            return self._scoping.back(result)

        forward.__name__ = name
        return forward

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await self._forward(name, protocol_signatures()[name])(*args, **kwargs)

    def admitted(self) -> AbstractAsyncContextManager[None]:
        """The wrapped store's admission (a scope shares its store's pool)."""
        return self.store.admitted()

    async def load(self, conversation_id: str) -> Snapshot:
        result: Snapshot = await self._call("load", conversation_id)
        return result

    async def append(self, conversation_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call("append", conversation_id, events, *args, **kwargs)

    async def append_compacting(
        self, conversation_id: str, events: Any, planner: Any, *args: Any, **kwargs: Any
    ) -> Any:
        return await self._call(
            "append_compacting", conversation_id, events, planner, *args, **kwargs
        )

    async def apply(self, conversation_id: str, plan: Any) -> bool:
        result: bool = await self._call("apply", conversation_id, plan)
        return result

    async def history(self, conversation_id: str) -> Any:
        return await self._call("history", conversation_id)

    async def find_tool_events(self, conversation_id: str, tool_call_ids: Any) -> Any:
        return await self._call("find_tool_events", conversation_id, tool_call_ids)

    async def search(self, conversation_id: str, query: Any) -> Any:
        return await self._call("search", conversation_id, query)

    async def record_compaction_error(self, conversation_id: str, message: str | None) -> None:
        await self._call("record_compaction_error", conversation_id, message)

    async def compactions(self, conversation_id: str) -> Any:
        return await self._call("compactions", conversation_id)

    async def clear(self, conversation_id: str) -> None:
        await self._call("clear", conversation_id)

    async def conversations(self) -> list[str]:
        """The scope's conversation ids (bare), sorted."""
        listed = getattr(self.store, "list_conversations", None)
        if callable(listed):
            records = await listed(self._scoping.prefix, None, 0, _ALL)
            return sorted(self._scoping.back(r.conversation_id) for r in records)
        return sorted(self._scoping.bare_ids(await self.store.conversations()))

    async def aclose(self) -> None:
        """Nothing: the view does not own the store."""

    def __repr__(self) -> str:
        return f"AsyncScopedStore({self.store!r}, {self.scope!r})"


def async_scoped_view(store: AsyncStore, scope: Scope) -> AsyncScopedStore:
    """``store`` (async) seen from inside ``scope``."""
    if isinstance(store, AsyncScopedStore):
        raise ConfigurationError(
            f"store ({store!r}) is already scoped: scopes do not nest (use the unbound memory)"
        )
    return AsyncScopedStore(store, scope)


__all__ = [
    "AsyncScopedStore",
    "ScopedStore",
    "async_scoped_view",
    "protocol_signatures",
    "scoped_view",
]
