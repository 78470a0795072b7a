"""Which device can serve which job group: eligibility as data.

Devices are folded into *slots*; jobs with equal requirements form *groups*. The index keeps
a boolean slot x group matrix and folds slots with the same eligible groups into
*signatures*, the keys of every dispatch decision. Slots and groups only grow, so ids stay
stable.

A device that reports its attributes (the pipeline's case, `slot_for_attrs`) gets the slot
of its attributes *projected onto the thresholds requirements use*: each attribute some
requirement tests is floored to the highest threshold on it that the value meets, and every
other attribute is dropped. Devices with the same projection are eligible for exactly the
same groups, so nothing is lost, and the number of slots stays bounded by the requirements,
whatever values devices report:

    slots <= product over tested attributes a of (distinct thresholds on a + 1)

(with the paper's four requirement tiers, 4 attributes and at most 4 thresholds each: 625).
Without it, every distinct reported value made a slot (issue 12, defect 7: 20,000 check-ins
with distinct float attributes took 5 -> 45 ms of CPU per check-in and 74 -> 119 MB, never
freed). A threshold added later only refines the projection of later check-ins; slots made
before stay correct for the devices that still map to them.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from venn.core.model import Requirement

VECTOR_CACHE_MAX = 100_000
"""Distinct attribute sets whose slot ``slots_for`` remembers."""


class EligibilityIndex:
    """Slot x group eligibility matrix with signature folding."""

    def __init__(self) -> None:
        self._slot_of_key: dict[Hashable, int] = {}
        self._slot_attrs: list[Mapping[str, float]] = []
        self._group_of_req: dict[Hashable, int] = {}
        self._cuts: dict[str, list[float]] = {}  # attribute -> sorted thresholds on it
        self._slot_of_vector: dict[Hashable, int] = {}  # slots_for's attribute sets
        self.requirements: list[Requirement] = []
        self._matrix = np.zeros((0, 0), dtype=bool)
        self._sig_of_slot = np.zeros(0, dtype=np.int32)
        self._sig_masks: list[tuple[bool, ...]] = []
        self._sig_matrix = np.zeros((0, 0), dtype=bool)
        self._dirty = True

    # -- registration ---------------------------------------------------------------
    def group(self, requirement: Requirement, label: Hashable = None) -> int:
        """Group id of a requirement, creating the group on first sight. Jobs with equal
        requirements but different ``label`` (a tenant and priority class) form
        different groups of equal eligibility."""
        key: Hashable = requirement if label is None else (requirement, label)
        gid = self._group_of_req.get(key)
        if gid is None:
            gid = len(self.requirements)
            self._group_of_req[key] = gid
            self.requirements.append(requirement)
            for name, minimum in requirement.thresholds:
                cuts = self._cuts.setdefault(name, [])
                if minimum not in cuts:
                    insort(cuts, minimum)
            self._cuts = dict(sorted(self._cuts.items()))
            self._slot_of_vector.clear()  # projections may change with the new thresholds
            column = np.array([requirement.admits(a) for a in self._slot_attrs], dtype=bool)
            self._matrix = np.concatenate(
                [self._matrix.reshape(len(self._slot_attrs), gid), column[:, None]], axis=1
            )
            self._dirty = True
        return gid

    def slot(self, key: Hashable, attrs: Mapping[str, float]) -> int:
        """Slot id of a device attribute set identified by ``key``."""
        sid = self._slot_of_key.get(key)
        if sid is None:
            sid = len(self._slot_attrs)
            self._slot_of_key[key] = sid
            self._slot_attrs.append(dict(attrs))
            row = np.array([r.admits(attrs) for r in self.requirements], dtype=bool)
            self._matrix = np.concatenate(
                [self._matrix.reshape(sid, len(self.requirements)), row[None, :]], axis=0
            )
            self._dirty = True
        return sid

    def project(self, attrs: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
        """The attributes as the requirements see them: each tested attribute floored to
        the highest threshold it meets (dropped when it meets none), untested ones dropped."""
        kept = []
        for name, cuts in self._cuts.items():
            value = attrs.get(name)
            if value is None:
                continue
            met = bisect_right(cuts, value)
            if met:
                kept.append((name, cuts[met - 1]))
        return tuple(kept)

    def slot_for_attrs(self, attrs: Mapping[str, float]) -> int:
        """Slot of a device identified only by its attributes (the pipeline's case)."""
        projected = self.project(attrs)
        return self.slot(("attrs", projected), dict(projected))

    def slots_for(
        self, keys: Sequence[Hashable], attrs: Mapping[Any, Mapping[str, float]]
    ) -> np.ndarray:
        """Slots of many devices identified only by their attributes: ``keys[i]`` names
        device i's attribute set and ``attrs[key]`` is that set. Each distinct set is
        projected once and remembered until a new threshold changes the projection."""
        known = self._slot_of_vector
        missing = set(keys).difference(known)
        if len(known) + len(missing) > VECTOR_CACHE_MAX:
            known.clear()  # bounded whatever devices report
            missing = set(keys)
        for key in missing:
            known[key] = self.slot_for_attrs(attrs[key])
        return np.fromiter(map(known.__getitem__, keys), dtype=np.int64, count=len(keys))

    def add_profiles(self, profiles: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Register many attribute sets at once; returns their slot ids (profile i -> key i)."""
        return np.array([self.slot(("profile", i), a) for i, a in enumerate(profiles)])

    # -- queries --------------------------------------------------------------------
    @property
    def num_groups(self) -> int:
        return len(self.requirements)

    @property
    def num_slots(self) -> int:
        return len(self._slot_attrs)

    def attrs_of(self, slot: int) -> Mapping[str, float]:
        """The attributes a slot stands for (a projection, in the pipeline's case)."""
        return self._slot_attrs[slot]

    @property
    def matrix(self) -> np.ndarray:
        """Boolean [slots, groups] eligibility."""
        return self._matrix

    def _refresh(self) -> None:
        if not self._dirty:
            return
        sig_of_mask: dict[tuple[bool, ...], int] = {}
        masks: list[tuple[bool, ...]] = []
        sig_of_slot = np.empty(self.num_slots, dtype=np.int32)
        for s in range(self.num_slots):
            mask = tuple(bool(x) for x in self._matrix[s])
            sig = sig_of_mask.get(mask)
            if sig is None:
                sig = len(masks)
                sig_of_mask[mask] = sig
                masks.append(mask)
            sig_of_slot[s] = sig
        self._sig_of_slot = sig_of_slot
        self._sig_masks = masks
        self._sig_matrix = np.array(masks, dtype=bool).reshape(len(masks), self.num_groups)
        self._dirty = False

    @property
    def signature_of_slot(self) -> np.ndarray:
        """int32 [slots] -> signature id; signatures group slots eligible for the same groups."""
        self._refresh()
        return self._sig_of_slot

    @property
    def signature_matrix(self) -> np.ndarray:
        """Boolean [signatures, groups] eligibility."""
        self._refresh()
        return self._sig_matrix

    @property
    def num_signatures(self) -> int:
        self._refresh()
        return len(self._sig_masks)

    def eligible(self, slot: int, group: int) -> bool:
        return bool(self._matrix[slot, group])
