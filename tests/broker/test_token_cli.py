"""`venn token ...`: issue tokens with the deployment's secret, revoke them on the broker."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from devtools.stack.capture import read_topics
from venn import events as ev
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.topics import ensure_topics

SECRET = secrets.token_urlsafe(32)


def venn(
    *args: str, secret: str | None = SECRET, broker: str = "", cwd: Path
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    env["VENN_RUN_DIR"] = str(cwd)
    if secret:
        env["VENN_AUTH_SECRET"] = secret
    if broker:
        env["VENN_BROKER"] = broker
    return subprocess.run(
        [sys.executable, "-m", "venn.cli", "token", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_issue_check_and_revoke(broker: str, partitions: int, tmp_path: Path) -> None:
    await ensure_topics(broker, partitions)
    tokens = Tokens(SECRET)
    out = venn("job", "--jobs", "exp-1", "--jobs", "sweep-*", "--owner", "ana", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    claims = tokens.check(out.stdout.strip(), "job")
    assert (claims.subject, claims.jobs) == ("ana", ("exp-1", "sweep-*"))
    assert claims.may_act_on_job("sweep-42") and not claims.may_act_on_job("exp-2")
    device = tokens.check(venn("device", "phone-7", cwd=tmp_path).stdout.strip(), "device")
    assert device.subject == "phone-7"

    missing = venn("admin", secret=None, cwd=tmp_path)
    assert missing.returncode == 1 and "VENN_AUTH_SECRET" in missing.stderr

    revoked = venn(
        "revoke", out.stdout.strip(), "--reason", "left the team", broker=broker, cwd=tmp_path
    )
    assert revoked.returncode == 0, revoked.stderr
    found = await read_topics(broker, [topics.REVOCATIONS])
    mine = [
        e
        for e in found[topics.REVOCATIONS]
        if isinstance(e, ev.TokenRevoked) and e.token_id == claims.token_id
    ]
    assert len(mine) == 1 and mine[0].reason == "left the team"
    forged = Tokens(secrets.token_urlsafe(32)).issue("job", "x", ttl_s=60)
    assert venn("revoke", forged, broker=broker, cwd=tmp_path).returncode == 1
