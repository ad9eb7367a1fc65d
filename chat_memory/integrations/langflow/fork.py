"""Fork Conversation in Langflow: a small action that starts a new conversation as a copy of
the wired Chat Memory's conversation as it was after a given seq ("edit and resend", "try
another answer"; ``ChatMemory.fork``, docs/lifecycle.md "Fork").

The conversation forked is the one the wired Chat Memory component names (its Conversation
ID, else the run's session id) in its store, inside its user's scope when it has a User ID:
a fork never crosses users. The output is the new conversation's id as a Message, to use as
the Conversation ID (or the session id) of the runs that continue the fork."""

from __future__ import annotations

from typing import Any

from lfx.custom.custom_component.component import Component
from lfx.io import HandleInput, MessageTextInput, Output
from lfx.schema.message import Message

from ...engine import ChatMemory
from ...errors import ConfigurationError
from ..langchain import ChatMemoryHistory

CHAT_MEMORY, NEW_CONVERSATION_ID, AT_SEQ = "chat_memory", "newConversationId", "atSeq"


def fork_inputs() -> list[Any]:
    """The Fork Conversation inputs: the Chat Memory to fork, the new id, the seq."""
    return [
        HandleInput(
            name=CHAT_MEMORY,
            display_name="Chat Memory",
            info="A Chat Memory component's Memory output: its conversation (Conversation ID, else the "
            "session id; its User ID's) is the one forked, in its store.",
            input_types=["Memory"],
            required=True,
        ),
        MessageTextInput(
            name=NEW_CONVERSATION_ID,
            display_name="New conversation ID",
            info="The fork's conversation id: a conversation not stored yet (in the same user's scope).",
            value="",
            required=True,
        ),
        MessageTextInput(
            name=AT_SEQ,
            display_name="At seq",
            info="Fork the conversation as it was right after the event with this seq was stored (its "
            "window then, its summary then); empty: as it is now.",
            value="",
        ),
    ]


def parse_seq(value: Any) -> int | None:
    """The At seq field's value: a whole number at least 0, or None when empty."""
    if hasattr(value, "text") and not isinstance(value, str):  # a wired Message
        value = value.text
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ConfigurationError(f"At seq ({value!r}) must be a whole number")
    try:
        seq = int(value.strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"At seq ({value!r}) must be a whole number") from None
    if seq < 0:
        raise ConfigurationError(f"At seq ({seq}) must be at least 0")
    return seq


class ForkConversationComponent(Component):
    """Forks the wired Chat Memory's conversation into a new one."""

    icon = "git-branch"

    def source(self) -> tuple[ChatMemory, str]:
        """The wired Chat Memory's (sync) memory and conversation id."""
        history = getattr(self, CHAT_MEMORY, None)
        if not isinstance(history, ChatMemoryHistory):
            got = "nothing wired" if history in (None, "") else type(history).__name__
            raise ConfigurationError(
                f"Chat Memory ({got}) must be a Chat Memory component's Memory output"
            )
        memory = history.memory
        if not isinstance(memory, ChatMemory):
            raise ConfigurationError(
                f"Chat Memory ({type(memory).__name__}) must be a sync memory to fork from Langflow"
            )
        return memory, history.conversation_id

    def new_conversation_id(self) -> str:
        """The New conversation ID field (refused when blank)."""
        value: Any = getattr(self, NEW_CONVERSATION_ID, None)
        if hasattr(value, "text") and not isinstance(value, str):
            value = value.text
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"New conversation ID ({value!r}) is required")
        return value.strip()

    def build_fork(self) -> Message:
        """Fork now; the new conversation's id as the message text, the details as data."""
        memory, source = self.source()
        new_id, at = self.new_conversation_id(), parse_seq(getattr(self, AT_SEQ, None))
        window = memory.fork(source, new_id, at)
        self.status = f"Forked {source!r} at {'now' if at is None else at} into {new_id!r}"
        return Message(
            text=new_id,
            data={"conversationId": new_id, "forkedFrom": source, "at": at, "window": len(window)},
        )


FORK_OUTPUTS = [
    Output(display_name="New conversation", name="fork", method="build_fork", types=["Message"])
]

__all__ = ["FORK_OUTPUTS", "ForkConversationComponent", "fork_inputs", "parse_seq"]
