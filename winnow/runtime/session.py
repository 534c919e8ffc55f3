"""A minimal harness loop: user turns go out through the client while the runtime watches.

session = Session(conversation, anthropic.AsyncAnthropic(), compactor=..., budget=...)
done = await session.send("Fix the failing test")   # preempts any idle work first
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from winnow.runtime.budget import ContextBudget
from winnow.runtime.idle import IdleCompactor
from winnow.runtime.llm import Completion, Conversation, LLMError, client_api, complete

__all__ = ["Session"]


class Session:
    """Sends user turns through an official async SDK client (`anthropic.AsyncAnthropic`,
    `openai.AsyncOpenAI`); tells the compactor and the budget about each one."""

    def __init__(
        self,
        conversation: Conversation,
        client: Any,
        *,
        compactor: IdleCompactor | None = None,
        budget: ContextBudget | None = None,
    ) -> None:
        if client_api(client) != conversation.api:
            raise ValueError(f"a {client_api(client)} client for a {conversation.api} conversation")
        self.conversation = conversation
        self.client = client
        self.compactor = compactor
        self.budget = budget
        self.last: Completion | None = None

    async def send(self, content: Any, on_text: Callable[[str], None] | None = None) -> Completion:
        """One user turn. On failure (LLMError, cancellation) the history is as it was before."""
        if self.compactor:
            self.compactor.user_activity()
        conv = self.conversation
        conv.append({"role": "user", "content": content})
        try:
            done = await complete(self.client, conv, on_text=on_text)
            if not done.ended:  # a cut answer would be taken for the whole one on the next turn
                raise LLMError("the answer's stream closed before its end")
        except BaseException:
            conv.replace(conv.messages[:-1])
            raise
        conv.append(done.message)
        self.last = done
        if self.budget:
            self.budget.record(done.usage, source="session")
        if self.compactor:
            self.compactor.turn_ended(done.usage)
        return done

    def interrupt(self) -> None:
        """The user pressed Esc: stop any idle work at once."""
        if self.compactor:
            self.compactor.preempt("interrupt")
