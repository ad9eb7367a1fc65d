"""Responses input items and chat-memory events, both ways: the mapping behind
:class:`~chat_memory.integrations.openai_agents.ChatMemorySession`, with no import of the SDK.

Every item becomes one event with an id of chat-memory's own and keeps the item verbatim in
``metadata["openai_item"]``; a window becomes the stored items again, as given, with only the
items a valid request needs added (the summary, a synthetic output for a call without one, a
note for an output whose call is not shown). See docs/integrations.md."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..config import SummaryPlacement
from ..errors import InvalidEventError, InvalidInputError
from ..events import Event, EventType
from ..render.plan import Step, Text, plan, result_text
from ..safe_json import MAX_DOCUMENT_DEPTH, JSONLimitError, check, loads

#: The SDK's placeholder id on items of models that give none. Item ids are never an item's
#: identity here (they repeat: this one, the SDK's test models' ``"1"``, servers reusing ids).
FAKE_ID = "__fake_id__"
#: Tool outputs carry no error flag: an error result is prefixed so the model knows.
ERROR_PREFIX = "Error: "
#: ``Event.metadata`` key of the Responses item an event was stored from, exactly as given:
#: :meth:`ChatMemorySession.get_items` replays it.
ITEM_KEY = "openai_item"
#: Item types with events of their own; every other type (hosted tools, reasoning, computer
#: use, MCP, …) is stored as an opaque item (see :func:`opaque_event`).
MODELLED_TYPES = frozenset({"message", "function_call", "function_call_output"})
#: At most this many characters of an opaque item's readable fields go into its event's text.
OPAQUE_TEXT_CHARS = 2_000
#: An opaque item's fields that say what it did (searchable, and shown by other renderers).
OPAQUE_TEXT_FIELDS = (
    "name",
    "server_label",
    "action",
    "query",
    "queries",
    "code",
    "arguments",
    "output",
    "summary",
)

Item = dict[str, Any]


def _content_text(content: Any, where: str) -> str:
    """A message's text: a string as it is; the text parts of a content list joined (other
    parts, such as images, as JSON so that nothing is silently lost)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInputError(
            f"{where}.content ({content!r}) must be a string or a list of content parts"
        )
    parts: list[str] = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
        else:
            parts.append(json.dumps(part, ensure_ascii=False, sort_keys=True, default=str))
    return "\n".join(parts)


def item_type(item: Item) -> Any:
    """An item's ``type`` (``"message"`` for a ``{"role", "content"}`` item)."""
    return item.get("type", "message" if "role" in item else None)


def _as_item(item: Any, where: str) -> Item:
    """``item`` as the JSON the SDK's own sessions store (``json.dumps`` of the item, a
    pydantic item dumped first): a copy, so that the caller's later changes never reach it."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_unset=True, mode="json")
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where} ({item!r}) must be a Responses input item (a dict)")
    try:
        copy: Item = json.loads(json.dumps(item, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"{where} is not JSON ({exc}); nothing of this list was stored"
        ) from None
    return copy


def checked_items(items: Iterable[Any]) -> list[Item]:
    """``items`` as dicts, each checked against the JSON limits (see :func:`events_from_items`)."""
    items = list(items)
    for i, item in enumerate(items):
        try:
            check(item, f"items[{i}]", MAX_DOCUMENT_DEPTH)
        except JSONLimitError as exc:
            raise InvalidEventError(f"{exc}; nothing of this list was stored") from None
    return [_as_item(item, f"items[{i}]") for i, item in enumerate(items)]


def _call_id(item: Item, where: str) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInputError(f"{where}.call_id ({call_id!r}) must be a non-empty string")
    return call_id


def opaque_event(item: Item) -> Event:
    """An item of a type chat-memory does not model (``web_search_call``, ``reasoning``,
    ``computer_call``, ``mcp_call``, …) as an ``assistant`` event that keeps the item verbatim:
    it never starts a turn (so it stays with the step that made it, through compaction and
    ``limit``), its text (the type and a few readable fields) is searchable, and
    :meth:`ChatMemorySession.get_items` replays the item itself."""
    fields = {k: item[k] for k in OPAQUE_TEXT_FIELDS if item.get(k) not in (None, "", [], {})}
    detail = json.dumps(fields, ensure_ascii=False, sort_keys=True, default=str) if fields else ""
    if len(detail) > OPAQUE_TEXT_CHARS:
        detail = detail[:OPAQUE_TEXT_CHARS] + "…"
    return Event.assistant(f"[{item_type(item)}] {detail}".rstrip(), metadata={ITEM_KEY: item})


def event_from_item(item: Any, index: int = 0, tool_call_id: str | None = None) -> Event:
    """The event one Responses input item maps to, with the item kept verbatim in
    ``metadata["openai_item"]``. The event's ``id`` is new: an item's own ``id`` is kept in the
    item, never used as the event's identity. ``tool_call_id`` is the stored id of a function
    call or output (default: the item's ``call_id``; see :func:`events_from_items`)."""
    where = f"items[{index}]"
    item = _as_item(item, where)
    kind = item_type(item)
    kept = {ITEM_KEY: item}
    if kind == "message" and item.get("role") in ("user", "assistant", "system", "developer"):
        text = _content_text(item.get("content", ""), where)
        make = {"user": Event.user, "assistant": Event.assistant}.get(item["role"], Event.system)
        return make(text, metadata=kept)
    if kind == "function_call":
        call_id, name, raw = _call_id(item, where), item.get("name"), item.get("arguments", "{}")
        try:
            # text the model wrote: nested too deep, a huge integer or no JSON at all is kept
            # as that text (replayed verbatim), as the SDK's SQLiteSession keeps it
            arguments = (
                loads(raw, f"{where}.arguments", MAX_DOCUMENT_DEPTH)
                if isinstance(raw, str)
                else raw
            )
        except JSONLimitError:
            arguments = None
        if not isinstance(arguments, dict):
            kept["raw_arguments"] = str(raw)
        return Event.tool_call(
            str(name),
            arguments if isinstance(arguments, dict) else {},
            call_id=tool_call_id or call_id,
            metadata=kept,
        )
    if kind == "function_call_output":
        call_id = _call_id(item, where)
        output = item.get("output", "")
        text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
        return Event.tool_result(tool_call_id or call_id, text, metadata=kept)
    return opaque_event(item)


def _item_call_id(event: Event) -> str | None:
    item = event.metadata.get(ITEM_KEY)
    return item.get("call_id") if isinstance(item, dict) else event.tool_call_id


def events_from_items(items: Iterable[Any], window: Sequence[Event] = ()) -> list[Event]:
    """The events a list of Responses input items maps to, in order, one per item.

    Tool ids: a ``function_call`` keeps its ``call_id`` as the stored ``tool_call_id`` unless
    that id is already used in ``window`` (the conversation's window) or earlier in the list;
    then the pair is stored under ``<call_id>_<n>`` (the item keeps its own ``call_id``). A
    ``function_call_output`` answers the oldest unanswered call with its ``call_id`` in the
    list or the window; an output with no such call (its call was archived, never stored, or
    already answered) is stored as an opaque item, so that it never fails a run.

    An item nested more than :data:`~chat_memory.safe_json.MAX_DOCUMENT_DEPTH` levels deep or
    holding an integer of more than :data:`~chat_memory.safe_json.MAX_INT_DIGITS` digits
    refuses the whole list with an :class:`InvalidEventError` naming it (the SDK's
    SQLiteSession, whose ``json.dumps`` fails on such an item, stores none of the list
    either); a function call's ``arguments`` text is a string and is stored whatever it holds."""
    dicts = checked_items(items)
    used = {e.tool_call_id for e in window if e.tool_call_id}
    answered = {e.tool_call_id for e in window if e.type is EventType.TOOL_RESULT}
    waiting: dict[str | None, list[str]] = {}  # an item's call_id -> stored ids of its open calls
    for e in window:
        if e.type is EventType.TOOL_CALL and e.tool_call_id not in answered:
            waiting.setdefault(_item_call_id(e), []).append(e.tool_call_id or "")
    events: list[Event] = []
    for i, item in enumerate(dicts):
        kind = item_type(item)
        if kind == "function_call":
            call_id = _call_id(item, f"items[{i}]")
            stored, n = call_id, 1
            while stored in used:
                n += 1
                stored = f"{call_id}_{n}"
            used.add(stored)
            waiting.setdefault(call_id, []).append(stored)
            events.append(event_from_item(item, i, stored))
        elif kind == "function_call_output":
            open_calls = waiting.get(_call_id(item, f"items[{i}]"))
            events.append(
                event_from_item(item, i, open_calls.pop(0)) if open_calls else opaque_event(item)
            )
        else:
            events.append(event_from_item(item, i))
    return events


def items_from_window(
    window: Sequence[Event],
    summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE,
) -> list[list[Item]]:
    """A window as Responses input items, in groups that must stay together: the pinned
    ``system`` items (and the summary with ``summary_placement="system_prompt"``), user
    messages (the summary otherwise), and each assistant step (its messages, opaque items and
    ``function_call`` items, then one ``function_call_output`` per call, a synthetic error
    output for a call without a result) as one group. An event stored from an item replays
    that item as given; a tool result the window shows as a stub
    (``compress_tool_results``) replays its item with the stub as ``output``. Built on the
    renderers' plan, so the rules of docs/rendering.md hold."""
    shown = plan(window, None, summary_placement)
    real = [e for e in window if e.is_real]
    paired = {
        id(c.result)
        for part in shown.parts
        if isinstance(part, Step)
        for c in part.calls
        if c.result is not None
    }
    # plan() walks the real events in order: its user-side texts and its step texts map back to them so
    users = iter(
        [
            e
            for e in real
            if e.type is EventType.USER or (e.type is EventType.TOOL_RESULT and id(e) not in paired)
        ]
    )
    texts = iter([e for e in real if e.type is EventType.ASSISTANT and e.content.strip()])
    groups: list[list[Item]] = []
    system = [
        _replay(e) or {"role": "system", "content": e.content}
        for e in window
        if e.type is EventType.SYSTEM and e.content.strip()
    ]
    system += [{"role": "system", "content": shown.system_summary}] if shown.system_summary else []
    if system:
        groups.append(system)
    for part in shown.parts:
        if isinstance(part, Step):
            groups.append(_step(part, texts))
            continue
        event = None if part.summary else next(users)
        replayed = _replay(event) if event is not None and event.type is EventType.USER else None
        groups.append([replayed or {"role": "user", "content": part.text}])
    return groups


def item_of(
    event: Event, summary_placement: SummaryPlacement | str = SummaryPlacement.USER_MESSAGE
) -> Item:
    """The item one stored event replays as: the item it was stored from (kept verbatim), or,
    for an event added without one, the first item that event alone renders to."""
    replayed = _replay(event)
    if replayed is not None:
        return replayed
    return next(item for group in items_from_window([event], summary_placement) for item in group)


def _replay(event: Event | None) -> Item | None:
    item = event.metadata.get(ITEM_KEY) if event is not None else None
    return (
        copy.deepcopy(item) if isinstance(item, dict) else None
    )  # the caller may change what it gets


def _step(step: Step, texts: Iterator[Event]) -> list[Item]:
    items: list[Item] = []
    shown_ids: dict[int, str] = {}
    for block in step.blocks:
        if isinstance(block, Text):
            items.append(_replay(next(texts)) or {"role": "assistant", "content": block.text})
            continue
        replayed = _replay(block.event)
        if replayed is None:
            raw = block.event.metadata.get("raw_arguments")
            arguments = (
                raw
                if isinstance(raw, str)
                else json.dumps(block.event.arguments or {}, ensure_ascii=False)
            )
            replayed = {
                "type": "function_call",
                "call_id": block.id,
                "name": block.name,
                "arguments": arguments,
            }
        shown_ids[id(block)] = str(replayed.get("call_id", block.id))
        items.append(replayed)
    for call in step.calls:
        content, is_error = result_text(call)
        replayed = _replay(call.result)
        if replayed is None:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": shown_ids[id(call)],
                    "output": ERROR_PREFIX + content if is_error else content,
                }
            )
        else:
            if call.result is not None and "compressed" in call.result.metadata:
                replayed["output"] = (
                    content  # the stub the model is shown instead of a large result
                )
            items.append(replayed)
    return items


#: Item types that answer a call of another item, and the field naming it.
_ANSWER_KEYS = {"mcp_approval_response": "approval_request_id"}


def _answers(item: Item) -> str | None:
    """The id of the call an output-like item answers (``*_output`` items, MCP approval responses)."""
    kind = str(item_type(item))
    key = _ANSWER_KEYS.get(kind) or ("call_id" if kind.endswith("_output") else None)
    value = item.get(key) if key else None
    return value if isinstance(value, str) else None


def _safe(groups: list[list[Item]]) -> list[Item]:
    """The groups as one list in which every output-like item follows the item it answers: an
    opaque output whose call is not shown (archived, cut by ``limit``, never stored) becomes a
    user note in its place (after its group's outputs when it stands between a call and its
    output), never an orphan the provider would refuse."""
    seen: set[str] = set()
    out: list[Item] = []
    for group in groups:
        notes: list[Item] = []
        waiting: set[str] = set()  # calls of this group whose output has not come yet
        for item in group:
            answers = _answers(item)
            if answers is not None and answers not in seen:
                text = item.get("output", item)
                text = (
                    text
                    if isinstance(text, str)
                    else json.dumps(text, ensure_ascii=False, default=str)
                )
                note = {
                    "role": "user",
                    "content": f"[chat-memory] A {item_type(item)} for call {answers!r}, "
                    f"whose call is not in the visible history:\n{text}",
                }
                (notes if waiting else out).append(note)
                continue
            if answers is not None:
                waiting.discard(answers)
            else:
                waiting.update(item[k] for k in ("call_id",) if isinstance(item.get(k), str))
            seen.update(item[k] for k in ("call_id", "id") if isinstance(item.get(k), str))
            out.append(item)
        out += notes
    return out


def newest(groups: list[list[Item]], limit: int | None) -> list[Item]:
    """The newest whole groups with at most ``limit`` items in all (every group when ``limit``
    is None), as one list (:func:`_safe`). A function call never leaves without its output:
    when the newest group alone is longer than ``limit``, it is returned whole."""
    if limit is None:
        return _safe(groups)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInputError(f"limit ({limit!r}) must be None or a whole number, 0 or more")
    kept: list[list[Item]] = []
    count = 0
    for group in reversed(groups):
        if limit == 0 or (kept and count + len(group) > limit):
            break
        kept.append(group)
        count += len(group)
    return _safe(kept[::-1])
