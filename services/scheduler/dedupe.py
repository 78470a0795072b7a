"""A bounded set of recently seen event ids (delivery is at least once)."""

from __future__ import annotations

from collections import OrderedDict


class RecentIds:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: str) -> None:
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
