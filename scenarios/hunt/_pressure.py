"""Object-store pressure: the driver fills the node's object store past its capacity, so Ray
spills what the store holds (the program's values among them), then frees what it put. The
store's own counters say whether it really spilled, and the victim's owner whether the victim's
object was among what spilled: a pressure that spilled only its own refs is not landed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: How far past the store's capacity the pressure fills it.
OVERFILL = 1.25
#: Bytes of each pressure object: a 200 MiB store takes 16 (a pressure, freeing included, took
#: 1.5 s; 1.1 s in a 96 MiB store: Ray 2.60, 2026-12-04, this machine).
CHUNK = 16 * 1024 * 1024
#: Seconds the store has to give the pressure's bytes back once they are freed.
FREE_BOUND = 10.0
#: Seconds the victim's owner has to hear that its object was spilled (the raylet tells it
#: after the spill is written; it had heard by the time the pressure was freed, in 1.0 to
#: 3.4 s: Ray 2.60, 2026-12-05, this machine).
SPILL_BOUND = 5.0
#: Milliseconds one question to the victim's owner may take (a stopped owner answers never).
ASK_MS = 1000


@dataclass(frozen=True, slots=True)
class Pressure:
    """What one pressure did: the store's capacity, the bytes put into it, the bytes the
    store spilled meanwhile (its cumulative counter's rise), and whether Ray spilled the
    victim's object (its owner's ``did_spill``)."""

    capacity: int
    pressed: int
    spilled: int
    victim_spilled: bool

    @property
    def landed(self) -> bool:
        """Fail closed: only a store filled past its capacity that spilled, and spilled the
        victim's own object (not only the pressure's), counts as landed."""
        return self.capacity > 0 and self.pressed > self.capacity and self.spilled > 0 and self.victim_spilled


def store_stats(address: str) -> Any:
    """The cluster's object-store counters (``ObjectStoreStats``: spilled, used, capacity)."""
    from ray._private import internal_api

    return internal_api.get_memory_info_reply(internal_api.get_state_from_address(address),
                                              timeout_seconds=FREE_BOUND).store_stats


def press(address: str, *, victim: Any, overfill: float = OVERFILL) -> Pressure:
    """Put ``overfill`` times the store's capacity from the driver, holding every ref so the
    store must spill; free them all and wait (bounded) for the store to give the bytes back;
    then ask whether ``victim`` (a ref to the program's value in the store) was spilled."""
    import numpy as np
    import ray

    before = store_stats(address)
    # object_store_bytes_avail is the capacity, not what is free: it stayed 200 MiB with
    # 160 MiB in use (Ray 2.60, 2026-12-04, this machine).
    capacity = int(before.object_store_bytes_avail)
    held: list[Any] = []
    try:
        while len(held) * CHUNK <= capacity * overfill:
            held.append(ray.put(np.zeros(CHUNK, np.uint8)))
        spilled = int(store_stats(address).spilled_bytes_total - before.spilled_bytes_total)
    finally:
        pressed = len(held) * CHUNK
        held.clear()
    _wait_freed(address, capacity)
    return Pressure(capacity=capacity, pressed=pressed, spilled=spilled, victim_spilled=was_spilled(victim))


def was_spilled(ref: Any, *, bound: float = SPILL_BOUND) -> bool:
    """Has Ray spilled the object ``ref`` names? Its owner records each spill of an object it
    owns (``did_spill`` in ``ray.experimental.get_object_locations``, which asks the owner);
    waits (bounded) for the news, False past the bound or when the owner cannot say (fail closed)."""
    from chaos import wait_until
    from chaos.errors import HangError

    try:
        return bool(wait_until(lambda: _did_spill(ref), timeout=bound, interval=0.05,
                               what="the victim's owner to report its spill"))
    except HangError:
        return False


def _did_spill(ref: Any) -> bool:
    """One ref a call: a call over refs of two owners crashed the driver, its second owner's reply
    setting an answered promise again (std::future_error, SIGABRT in CoreWorker::
    GetLocationFromOwner: Ray 2.60, 2026-12-05, this machine)."""
    from ray.experimental import get_object_locations

    try:
        where = get_object_locations([ref], timeout_ms=ASK_MS).get(ref, {})
    except Exception:  # noqa: BLE001 - fail closed: an owner that cannot say has not said it spilled
        return False
    return bool(where.get("did_spill"))


def _wait_freed(address: str, capacity: int) -> None:
    """Wait until the store is back under half full, so the program's later steps meet no
    pressure; past the bound it goes on (the oracle then judges those steps as it finds them)."""
    from chaos import wait_until
    from chaos.errors import HangError

    try:
        wait_until(lambda: store_stats(address).object_store_bytes_used < capacity // 2,
                   timeout=FREE_BOUND, interval=0.05, what="the object store to free the pressure")
    except HangError:
        pass
