"""Every chunkio error the command-line tests make is held to
the message bound (:mod:`message_limit`)."""

from message_limit import messages_within_limit

__all__ = ["messages_within_limit"]
