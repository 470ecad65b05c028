"""Stock counts per SKU, kept by one actor that survives crashes and counts each receipt once."""

from actors import Checkpointable, CheckpointConfig, mutation


class Stock(Checkpointable):
    """Receipts in, counts out. Every receipt is logged before it is acknowledged (WAL), and a
    receipt Ray delivers again after a crash, under the same ``(writer_id, seq)``, counts once."""

    def __init__(self, storage: str):
        self.counts: dict[str, int] = {}
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal", every_n=200))

    def state_dict(self):
        return {"counts": dict(self.counts)}

    def load_state_dict(self, state):
        self.counts = {str(sku): int(n) for sku, n in state["counts"].items()}

    @mutation(idempotent=True)
    def receive(self, sku: str, quantity: int, *, writer_id: str, seq: int) -> None:
        self.counts[sku] = self.counts.get(sku, 0) + quantity

    def count(self, sku: str) -> int:
        return self.counts.get(sku, 0)

    def total(self) -> int:
        return sum(self.counts.values())
