"""KRaft cluster ids (devtools.kafka.new_cluster_id): the storage tool reads an id that
begins with '-' as an option, so such ids must never be made (one Kafka start in 64 failed
with "argument --cluster-id/-t: expected one argument")."""

from __future__ import annotations

import base64

from devtools.kafka import new_cluster_id


def test_cluster_ids_are_uuids_that_never_begin_with_a_dash() -> None:
    ids = [new_cluster_id() for _ in range(5000)]  # 5000 draws: ~78 would begin with '-'
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
    assert any("-" in i for i in ids)  # still the whole base64url alphabet elsewhere
