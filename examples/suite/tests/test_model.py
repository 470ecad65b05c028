"""Random receipts, checkpoints, kills, pauses and kills with receipts in flight, against a model."""

import hypothesis.strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test
from inventory import Stock

from actors import Writer
from chaos.testing import ActorChaosMachine


class StockMachine(ActorChaosMachine):
    max_restarts = -1  # every kill restarts it

    def __init__(self):
        self.me = Writer()  # one writer for the whole example: its seqs never repeat
        super().__init__()

    def create(self, storage):
        return self.remote(Stock, storage)

    def observe(self, actor):
        return self.call(actor.total.remote())

    @rule(quantity=st.integers(1, 5))
    def receive(self, quantity):
        self.call(self.actor.receive.remote("apple", quantity, **self.me.next()))
        self.model += quantity

    def in_flight(self, actor):  # lets the machine kill while receipts are on their way
        return actor.receive.remote("apple", 1, **self.me.next()), lambda model: model + 1


def test_stock_matches_its_model(ray_cluster):
    run_state_machine_as_test(StockMachine)  # raychaos's `ci` profile: 5 examples of up to 10 steps
