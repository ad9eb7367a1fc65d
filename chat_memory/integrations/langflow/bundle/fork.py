"""Fork Conversation as a Langflow component: a new conversation from the wired Chat Memory's."""

from __future__ import annotations

from chat_memory.integrations.langflow.fork import (
    FORK_OUTPUTS,
    ForkConversationComponent,
    fork_inputs,
)


class ChatMemoryForkConversationComponent(ForkConversationComponent):
    name = "forkConversation"
    display_name = "Fork Conversation"
    description = (
        "Starts a new conversation as a copy of the wired Chat Memory's conversation as it was after "
        "a seq (edit and resend, try another answer). Later messages to either never show in the other."
    )
    inputs = fork_inputs()
    outputs = FORK_OUTPUTS
