"""``venn token ...``: issue and revoke the deployment's API tokens (needs its secret:
VENN_AUTH_SECRET, or the run dir's own beside `venn up`)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from aiokafka import AIOKafkaProducer

from venn import events as ev
from venn.auth import AuthError, Tokens
from venn.broker import topics
from venn.broker.publish import KafkaEvents
from venn.settings import Settings

app = typer.Typer(help="Issue and revoke API tokens.", no_args_is_help=True)

DAY = 86400.0
Ttl = Annotated[float, typer.Option("--ttl", help="Lifetime, seconds.")]


def _tokens() -> Tokens:
    settings = Settings.from_env()
    if not settings.auth_enabled:
        typer.echo(
            "error: no secret: set VENN_AUTH_SECRET, or run in the run dir of `venn up`", err=True
        )
        raise typer.Exit(1)
    return Tokens(settings.auth_secret)


@app.command()
def device(device_id: str, ttl: Ttl = 30 * DAY) -> None:
    """A device token (what POST /v1/devices hands out)."""
    typer.echo(_tokens().issue("device", device_id, ttl_s=ttl))


@app.command()
def job(
    jobs: Annotated[
        list[str], typer.Option("--jobs", help="A job id, or a prefix ending in *; repeatable.")
    ],
    owner: Annotated[str, typer.Option(help="Who holds it (its subject).")] = "owner",
    ttl: Ttl = 7 * DAY,
) -> None:
    """A job owner's token: acts on the listed jobs only."""
    typer.echo(_tokens().issue("job", owner, jobs=jobs, ttl_s=ttl))


@app.command()
def enroll(
    owner: Annotated[str, typer.Option(help="Who provisions the devices.")] = "fleet",
    ttl: Ttl = 30 * DAY,
) -> None:
    """A token that may enrol devices (POST /v1/devices)."""
    typer.echo(_tokens().issue("enroll", owner, ttl_s=ttl))


@app.command()
def admin(owner: Annotated[str, typer.Option()] = "operator", ttl: Ttl = 1 * DAY) -> None:
    """An operator's token: allowed everything."""
    typer.echo(_tokens().issue("admin", owner, ttl_s=ttl))


@app.command()
def revoke(
    token: str, reason: Annotated[str, typer.Option(help="Why.")] = "revoked by an operator"
) -> None:
    """Revoke a token: every service refuses it once it reads venn.revocations."""
    tokens = _tokens()
    try:
        claims = tokens.check(token)
    except AuthError as exc:
        if exc.code != "expired_token":
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo("the token has expired already: nothing to revoke")
        return
    event = ev.TokenRevoked(
        event_id=f"revoke:{claims.token_id}",
        time=time.time(),
        token_id=claims.token_id,
        expires_at=claims.expires_at,
        reason=ev.clean_text(reason),
    )

    admin = Settings.from_env().for_role("admin")
    broker = admin.broker

    async def publish() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker, acks="all", request_timeout_ms=10_000, **admin.kafka_options
        )
        await producer.start()
        try:
            await asyncio.wait_for(
                KafkaEvents(producer).publish(topics.REVOCATIONS, event),
                20,
            )
        finally:
            await producer.stop()

    try:
        asyncio.run(publish())
    except Exception as exc:
        typer.echo(
            f"error: could not publish to {topics.REVOCATIONS} on {broker}: {exc!r}", err=True
        )
        raise typer.Exit(1) from None
    typer.echo(f"revoked {claims.kind} token {claims.token_id} of {claims.subject}")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="token")
