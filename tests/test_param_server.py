"""ParameterServer: exactly-once pushes, staleness, sync averaging, validation (in-process)."""

from __future__ import annotations

import functools
import shutil
from typing import Any

import pytest
import torch

from actors import CheckpointConfig, ParameterServer
from actors.param_server import GradientError, StaleGradientError
from chaos.errors import InvalidConfig

LINEAR = functools.partial(torch.nn.Linear, 4, 2)


def server(storage: str, **kwargs: Any) -> ParameterServer:
    cfg = kwargs.pop("checkpoint", None) or CheckpointConfig(storage=storage, every_n=1000)
    return ParameterServer(LINEAR, checkpoint=cfg, restore="never", **kwargs)


def grads(scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(int(scale * 1000))
    return {"weight": torch.randn(2, 4, generator=g) * scale, "bias": torch.randn(2, generator=g)}


def reference(pushes: list[dict[str, torch.Tensor]], *, optimizer: str = "SGD",
              **kwargs: Any) -> dict[str, torch.Tensor]:
    """The same model and optimizer in plain torch, each gradient applied once."""
    torch.manual_seed(0)
    model = LINEAR()
    opt = getattr(torch.optim, optimizer)(model.parameters(), **(kwargs or {"lr": 0.01}))
    for g in pushes:
        for name, p in model.named_parameters():
            p.grad = g[name].clone()
        opt.step()
    return model.state_dict()


def assert_weights(ps: ParameterServer, expected: dict[str, torch.Tensor]) -> None:
    for name, value in ps.weights().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_duplicate_push_returns_the_first_result_and_applies_once(storage: str, optimizer: str) -> None:
    ps = server(storage, optimizer=optimizer, optimizer_kwargs={"lr": 0.1})
    first = ps.push(grads(1), worker_id="w0", seq=0, base_version=0)
    again = ps.push(grads(1), worker_id="w0", seq=0, base_version=0)
    assert (first.version, first.applied) == (1, True)
    assert (again.version, again.applied, again.duplicate) == (1, False, True)
    assert ps.stats().duplicate_pushes == 1 and ps.version() == 1
    assert_weights(ps, reference([grads(1)], optimizer=optimizer, lr=0.1))


def test_staleness_bound_rejects_or_drops(storage: str) -> None:
    ps = server(storage, max_staleness=1)
    ps.push(grads(1), worker_id="a", seq=0, base_version=0)
    ps.push(grads(2), worker_id="b", seq=0, base_version=0)  # 1 behind: allowed
    before = ps.digest()
    with pytest.raises(StaleGradientError, match=r"computed at version 0, 2 behind the server's 2 \(max_staleness=1\)"):
        ps.push(grads(3), worker_id="c", seq=0, base_version=0)
    assert ps.digest() == before
    dropping = server(storage + "-drop", max_staleness=0, on_stale="drop")
    dropping.push(grads(1), worker_id="a", seq=0, base_version=0)
    result = dropping.push(grads(2), worker_id="b", seq=0, base_version=0)
    assert result.dropped and not result.applied and dropping.stats().dropped_stale == 1


def test_sync_mode_averages_exactly_k_pushes(storage: str) -> None:
    ps = server(storage, mode="sync", sync_k=3, optimizer_kwargs={"lr": 1.0})
    results = [ps.push(grads(s), worker_id=f"w{i}", seq=0, base_version=0)
               for i, s in enumerate((1.0, 2.0, 3.0))]
    assert [r.applied for r in results] == [False, False, True]
    assert [r.pending for r in results[:2]] == [1, 2] and ps.version() == 1
    mean = {n: torch.stack([grads(s)[n] for s in (1.0, 2.0, 3.0)]).mean(0) for n in ("weight", "bias")}
    expected = reference([mean], lr=1.0)
    for name, value in ps.weights().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("bad", "message"),
    [({"weight": torch.zeros(2, 4)}, r"gradient names \['weight'\] differ from the model's \['bias', 'weight'\]"),
     ({"weight": torch.zeros(4, 2), "bias": torch.zeros(2)},
      r"gradient 'weight' has shape \[4, 2\], the parameter \[2, 4\]"),
     ({"weight": torch.full((2, 4), float("nan")), "bias": torch.zeros(2)}, r"gradients \['weight'\] hold NaN or inf")],
)
def test_bad_gradients_change_nothing(storage: str, bad: dict[str, torch.Tensor], message: str) -> None:
    ps = server(storage)
    before = ps.digest()
    with pytest.raises(GradientError, match=message):
        ps.push(bad, worker_id="w", seq=0, base_version=0)
    assert ps.digest() == before


def test_nonfinite_gradients_can_be_skipped(storage: str) -> None:
    ps = server(storage, on_nonfinite="skip")
    result = ps.push({"weight": torch.full((2, 4), float("inf")), "bias": torch.zeros(2)},
                     worker_id="w", seq=0, base_version=0)
    assert not result.applied and ps.version() == 0 and ps.stats().skipped_nonfinite == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"optimizer": "Adamm"}, "unknown optimizer 'Adamm'; use one of torch.optim's: .*Adam"),
     ({"mode": "semi"}, "unknown mode 'semi'; use one of 'async', 'sync'"),
     ({"sync_k": 0}, "`sync_k` must be a whole number >= 1, got 0"),
     ({"max_staleness": -1}, "`max_staleness` must be None or a whole number >= 0, got -1")],
)
def test_bad_configuration_is_refused(storage: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        server(storage, **kwargs)


def test_state_round_trips_with_optimizer_state(storage: str) -> None:
    ps = server(storage, optimizer="Adam", optimizer_kwargs={"lr": 0.05, "betas": (0.8, 0.9)})
    for seq in range(3):
        ps.push(grads(seq + 1), worker_id="w", seq=seq, base_version=seq)
    ps.checkpoint()
    # Restored from a copy: a restore from the same storage would supersede `ps` (the fence).
    shutil.copytree(storage, f"{storage}-copy")
    restored = ParameterServer(LINEAR, checkpoint=CheckpointConfig(storage=f"{storage}-copy", every_n=1000),
                               optimizer="Adam", optimizer_kwargs={"lr": 0.05}, restore="always")
    assert restored.digest() == ps.digest()
    assert restored.version() == 3
    # The optimizer state (Adam's moments and step) came back: the next step matches too.
    a = ps.push(grads(9), worker_id="w", seq=3, base_version=3)
    b = restored.push(grads(9), worker_id="w", seq=3, base_version=3)
    assert a == b and ps.digest() == restored.digest()


def test_the_dedupe_window_remembers_its_last_pushes_and_refuses_older_ones(storage: str) -> None:
    from actors._param_server import DEDUPE_WINDOW

    ps = server(storage)
    for seq in range(DEDUPE_WINDOW + 1):  # seq 0 falls out of the window
        assert ps.push(grads(1), worker_id="w", seq=seq, base_version=0).version == seq + 1
    oldest_kept = ps.push(grads(1), worker_id="w", seq=1, base_version=0)
    assert (oldest_kept.version, oldest_kept.applied, oldest_kept.duplicate) == (2, False, True)
    evicted = ps.push(grads(1), worker_id="w", seq=0, base_version=0)  # too old: never re-applied
    assert (evicted.applied, evicted.duplicate) == (False, True)
    assert ps.version() == DEDUPE_WINDOW + 1 and ps.stats().duplicate_pushes == 2
