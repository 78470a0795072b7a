"""`venn_mod`, the ClientApp side of venn-flower:

    app = ClientApp(mods=[venn_mod])
    answer_venn_queries(app)   # optional: lets a run go on when Venn is down from its start

For every task it tells the node's launcher that the task starts and ends (the launcher
stops checking in meanwhile and reports a Venn task's result the moment it ends, which
frees the node in Venn); a task of a Venn round the node no longer holds is refused at once.
It takes Venn's record off the message before the app sees it and marks the reply.

`answer_venn_queries` registers the answer to the ServerApp's ``query.venn`` (the node's
name and attributes), asked only when Venn is unreachable and the run has to find nodes
that meet its requirement by itself (Flower routes a message only to a registered
handler, so a mod alone cannot answer it).
"""

from __future__ import annotations

import time

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from venn_flower.desk import DeskClient
from venn_flower.profile import NodeConfigError, NodeProfile
from venn_flower.protocol import (
    QUERY_TYPE,
    mark_reply,
    profile_answer,
    stale_reply,
    tag_of,
    untag,
)

LEGACY_HINT = (
    "this ClientApp uses Flower's legacy client_fn/NumPyClient API, which reads "
    "'fitins.*'/'evaluateins.*' records that Message-API strategies (FedAvg of "
    "flwr.serverapp.strategy, wrapped by VennStrategy) do not send: write the ClientApp "
    "with @app.train()/@app.evaluate() handlers (docs/flower.md, 'NumPyClient apps')"
)


class LegacyClientApp(RuntimeError):
    """A Message-API task reached a legacy (client_fn / NumPyClient) ClientApp."""


def _legacy(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, KeyError) and ("fitins." in text or "evaluateins." in text)


def venn_mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Runs the task between telling the launcher it starts and it ends."""
    if message.metadata.message_type == QUERY_TYPE:
        return _profile(message, context)
    round_tag = tag_of(message)
    untag(message)
    desk = DeskClient.from_env()
    if desk is not None and not desk.start(round_tag):
        return stale_reply(message, "the node was given to another Venn round since")
    started = time.monotonic()
    try:
        reply = call_next(message, context)
    except Exception as exc:
        if desk is not None:
            desk.end(round_tag, False, time.monotonic() - started, repr(exc))
        if _legacy(exc):
            raise LegacyClientApp(LEGACY_HINT) from exc
        raise
    reason = (reply.error.reason or "error") if reply.has_error() else ""
    reported = desk is not None and desk.end(
        round_tag, not reply.has_error(), time.monotonic() - started, reason
    )
    if round_tag is not None:
        mark_reply(reply, reported)
    return reply


def _profile(message: Message, context: Context) -> Message:
    try:
        profile = NodeProfile.from_node_config(context.node_config)
    except NodeConfigError as exc:
        return Message(Error(code=1, reason=str(exc)), reply_to=message)
    return profile_answer(message, profile)


def answer_venn_queries(app: ClientApp) -> None:
    """Register the answer to ``query.venn``: the node's name and attributes."""
    app.query(QUERY_TYPE.split(".", 1)[1])(_profile)
