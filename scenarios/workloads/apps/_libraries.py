"""Workloads on Ray's own libraries under chaos: a Ray Train ``TorchTrainer``, a Ray Tune
experiment, RLlib's PPO.

Each checks the library's documented fault-tolerance guarantee from the outside, with
evidence it writes itself (a journal of epochs, read back as JSON) and a reference computed
without Ray, so a verdict never rests on what the library says about itself.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos import FaultKind, wait_until
from chaos.engine import import_extra
from scenarios.model._records import Verdict
from scenarios.model._workload import Params, Workload

__all__ = ["Iteration", "Restart", "RllibPPO", "TrainDDP", "TuneTrials", "combined",
           "epoch_record", "recovery_times", "reference_weights", "restarts", "restored_within",
           "resume_verdicts", "silent_drops"]

FEATURES, ROWS = 8, 256
#: What a killed Train worker looks like to chaos: Ray Train 2.60's worker actor class.
TRAIN_WORKER_CLASS = "RayTrainWorker"
TRAIN_CONTROLLER_CLASS = "TrainController"


def dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed linear-regression problem: the same rows for every run of ``seed``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    w = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    return x, (x @ w + 0.01 * rng.normal(size=(ROWS, 1))).astype(np.float32)


def initial_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return {"weight": rng.normal(scale=0.1, size=(1, FEATURES)).astype(np.float32),
            "bias": np.zeros(1, dtype=np.float32)}


def reference_weights(seed: int, *, epochs: int, steps: int, lr: float) -> dict[str, np.ndarray]:
    """What the run must end with, computed without Ray: full-batch gradient descent on the
    whole dataset (the DDP workers' shards are equal halves, and DDP averages their
    gradients, so the step is the same)."""
    import torch

    x, y = (torch.from_numpy(a) for a in dataset(seed))
    model = torch.nn.Linear(FEATURES, 1)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights(seed).items()})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs * steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def epoch_record(path: str, **fields: Any) -> None:
    """Append one JSON line to the epoch journal (rank 0 writes it; the driver reads it)."""
    with open(path, "a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()
        os.fsync(f.fileno())


def train_loop(config: dict[str, Any]) -> None:
    """The training function, on each Train worker: resume from the latest checkpoint,
    then per epoch ``steps`` full-batch steps on this rank's shard, a checkpoint reported."""
    import ray.train
    import ray.train.torch
    import torch

    rank, size = ray.train.get_context().get_world_rank(), ray.train.get_context().get_world_size()
    x, y = (torch.from_numpy(a[rank::size]) for a in dataset(config["seed"]))
    model = torch.nn.Linear(FEATURES, 1)
    start = _restore(model, config["seed"], ray.train.get_checkpoint())
    model = ray.train.torch.prepare_model(model)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for epoch in range(start, config["epochs"]):
        if rank == 0:
            epoch_record(config["journal"], event="start", epoch=epoch, pid=os.getpid(), t=time.time())
        for _ in range(config["steps"]):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            threading.Event().wait(config["pace"])  # the epoch's length: room for a fault
        _report(model, epoch, float(loss), rank)
        if rank == 0:
            epoch_record(config["journal"], event="end", epoch=epoch, pid=os.getpid(), t=time.time())


def _restore(model: Any, seed: int, checkpoint: Any) -> int:
    """Load the checkpoint's weights (or the seed's initial ones); the epoch to start at."""
    import torch
    from safetensors.torch import load_file

    if checkpoint is None:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights(seed).items()})
        return 0
    with checkpoint.as_directory() as folder:
        model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")))
        with open(os.path.join(folder, "epoch.json")) as f:
            return int(json.load(f)["epoch"]) + 1


def _report(model: Any, epoch: int, loss: float, rank: int) -> None:
    import ray.train
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if rank == 0:  # one copy of the weights (DDP keeps the ranks equal)
            state = {k: v.detach().contiguous() for k, v in model.module.state_dict().items()}
            save_file(state, os.path.join(folder, "model.safetensors"))
            with open(os.path.join(folder, "epoch.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report({"epoch": epoch, "loss": loss}, checkpoint=checkpoint)


#: Ray Train 2.60 takes a worker's report (and its checkpoint) when its controller polls the
#: worker group, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s) at the soonest, one report per
#: worker per poll; a poll that finds a worker busy past its timeout takes nothing from it. A
#: checkpoint counts once every worker's report of it was taken. A worker that dies first takes
#: its reports with it: training resumes from the last checkpoint taken. How long a report
#: waits has no bound on a busy machine, so the verdicts read when each was taken from the
#: library itself (a callback on Train's controller, on Tune's driver), never from a window.
TAKEN = "taken"


def train_taken_journal(journal: str) -> Any:
    """A Ray Train callback (it runs on the controller) journaling each checkpoint as the
    controller takes it: Train calls user callbacks after its checkpoint manager."""
    from ray.train import UserCallback

    class TakenJournal(UserCallback):  # type: ignore[misc]
        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            if checkpoint is not None:
                epoch_record(journal, event=TAKEN, epoch=metrics[0]["epoch"], t=time.time())

    return TakenJournal()


def tune_taken_journal(journal: str) -> Any:
    """A Ray Tune callback (it runs on the driver) journaling each trial checkpoint as Tune
    takes it (``on_checkpoint`` comes just before the trial records it, on the same thread)."""
    from ray import tune

    class TakenJournal(tune.Callback):  # type: ignore[misc]
        def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
            epoch_record(journal, event=TAKEN, epoch=_restored_iteration(checkpoint), t=time.time(),
                         trial=trial.config["trial"])

    return TakenJournal()


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart of the worker group, as the epoch journal shows it."""

    resumed_at: int  #: the first epoch the new attempt started
    started: float  #: wall time it started that epoch
    killed_at: float | None  #: wall time of the kill that ended the attempt before (None: none did)
    ended_before: tuple[tuple[int, float], ...]  #: (epoch, wall time) of each end before it
    taken_before: tuple[tuple[int, float], ...] = ()  #: (epoch, wall time) of each checkpoint taken before it

    @property
    def resumed_after(self) -> float | None:
        """Seconds from the kill to this attempt's first epoch (None: no kill ended the last)."""
        return None if self.killed_at is None else self.started - self.killed_at

    def latest_ended(self, *, before: float) -> int:
        """The last epoch that ended before ``before`` (-1: none)."""
        return max((e for e, t in self.ended_before if t <= before), default=-1)

    def latest_taken(self, *, before: float) -> int:
        """The last epoch whose checkpoint the library had taken before ``before`` (-1: none)."""
        return max((e for e, t in self.taken_before if t <= before), default=-1)


def restarts(journal: Sequence[Mapping[str, Any]], kills: Sequence[float]) -> list[Restart]:
    """Each attempt after the first: where it resumed, the kill that ended the attempt before
    it (the first after that attempt began: later ones hit a group still forming, with no
    report left to lose), what had ended and which checkpoints had been taken."""
    work = [r for r in journal if r["event"] != TAKEN]
    found, began = [], work[0]["t"] if work else 0.0
    for i, record in enumerate(work):
        if record["event"] == "start" and i and work[i - 1]["pid"] != record["pid"]:
            killed = min((k for k in kills if began <= k <= record["t"]), default=None)
            ended = tuple((r["epoch"], r["t"]) for r in work[:i] if r["event"] == "end")
            taken = tuple((r["epoch"], r["t"]) for r in journal if r["event"] == TAKEN and r["t"] <= record["t"])
            found.append(Restart(resumed_at=record["epoch"], started=record["t"], killed_at=killed, ended_before=ended,
                                 taken_before=taken))
            began = record["t"]
    return found


def resume_verdicts(journal: Sequence[Mapping[str, Any]], kills: Sequence[float], *, epochs: int,
                    unit: str = "epoch") -> list[Verdict]:
    """Every epoch (or iteration: ``unit``) ended; no restart skipped one (lost) or resumed
    at or before the last one whose checkpoint the library had taken before its kill; and,
    stricter, none ended twice (Ray Train 2.60 breaks it: see ``TAKEN``). With no checkpoint
    journaled as taken at all, the resume cannot be judged: that fails too."""
    ends = [r["epoch"] for r in journal if r["event"] == "end"]
    taken = [r["epoch"] for r in journal if r["event"] == TAKEN]
    found = restarts(journal, kills)
    # An epoch whose checkpoint the library took is done even if the kill came before its
    # worker journaled the end (seen here: Tune took iteration 11's checkpoint, the trial died
    # before writing "end", and the restart rightly resumed at 12).
    done = set(ends) | set(taken)
    skipped = [r.resumed_at for r in found
               if r.resumed_at > max(r.latest_ended(before=float("inf")), r.latest_taken(before=float("inf"))) + 1]
    lost = sorted(set(range(epochs)) - done)
    stale = [f"resumed at {r.resumed_at}, though the checkpoint of {unit} {r.latest_taken(before=r.killed_at)} "
             "had been taken before the kill" for r in found if r.killed_at is not None
             and r.resumed_at <= r.latest_taken(before=r.killed_at)]
    unexplained = [r.resumed_at for r in found if r.killed_at is None]
    twice = sorted({e for e in ends if ends.count(e) > 1})
    where = f"restarts resumed at {unit}s {[r.resumed_at for r in found] or 'none'}"
    unseen = "" if taken or not ends else f"; no checkpoint was journaled as taken though {len(ends)} {unit}s ended"
    return [Verdict.of(f"no_{unit}_lost", not lost and not skipped,
                    f"{epochs} {unit}s; never ended: {lost or 'none'}; {where}, skipping ahead: {skipped or 'none'}"),
            Verdict.over("resumed_from_latest_checkpoint", len(found),
                         held=not stale and not unexplained and not unseen,
                         detail=f"{where}; too far back: {stale or 'none'}; with no kill before them: "
                         f"{unexplained or 'none'}{unseen}"),
            Verdict.over(f"no_reported_{unit}_redone", len(ends), held=not twice,
                         detail=f"{unit}s that ran to their end (their report returned) twice: {twice or 'none'}; "
                         f"{where}")]


def combined(per_part: Mapping[str, Sequence[Verdict]]) -> list[Verdict]:
    """One verdict per name over several parts (trials): held when it held in each part
    that saw something it is about (a trial never killed has no restart to judge), and
    something was seen in one of them at least."""
    names = [v.name for v in next(iter(per_part.values()), [])]
    return [_combined(name, {part: v for part, vs in per_part.items() for v in vs if v.name == name})
            for name in names]


def _combined(name: str, parts: Mapping[str, Verdict]) -> Verdict:
    counted = [v.seen for v in parts.values() if v.seen is not None]
    held = all(v.held or v.seen == 0 for v in parts.values()) and (not counted or sum(counted) > 0)
    detail = "; ".join(f"{part}: {v.detail}" for part, v in parts.items())
    return Verdict.of(name, held, detail, sum(counted) if counted else None)


@dataclass(frozen=True, slots=True)
class Fit:
    """How ``trainer.fit()`` ended: its result, or the error it raised, and when."""

    seconds: float
    result: Any = None
    error: BaseException | None = None


class LibraryParams(Params):
    #: How long after the scenario's end the library's fit() may take to return.
    finish_within: float = 120.0


class TrainParams(LibraryParams):
    epochs: int = 8
    steps: int = 10
    pace: float = 0.05
    max_failures: int = 2


class TuneParams(LibraryParams):
    trials: int = 3
    iterations: int = 30
    pace: float = 0.3
    max_failures: int = 2


#: Seconds an env runner has to answer the probe's ping: a ping waits behind a sample in
#: progress (up to ``sample_timeout_s``), and one to a paused runner until the pause ends.
PING_TIMEOUT = 10.0


class RllibParams(Params):
    target_return: float = 150.0
    #: The runner's recovery bound for any fault (RECOVERY_TIMEOUT). RLlib restored a killed
    #: runner in 11-18 s here, in 40 s with a busy loop holding one of the two cores.
    restore_within: float = 60.0
    restart_failed_env_runners: bool = True
    sample_timeout_s: float = 5.0


class _LibraryRun(Workload):
    """A library's blocking ``fit()`` in a thread of its own, its progress journaled by the
    code it runs (JSON lines), bounded by the scenario's end plus ``finish_within``.

    No steady-state probe: the library restarts its own workers on its own schedule, and a
    count of journal records cannot fail; the epoch journal's verdicts judge recovery."""

    EXTRA = "apps"
    journal_path = ""


    def call_bounds(self) -> Mapping[str, float]:
        """The last step waits up to ``finish_within`` for the fit to end."""
        return {"step": self.finish_within + 60.0, "teardown": self.finish_within + 60.0}

    def start_fit(self, *, first: str) -> None:
        """Start ``fit`` and wait until the journal's first record (``first``: what it is):
        the run's clock starts with the work, so no fault comes before anything to hit."""
        p = self.ctx.params_as(LibraryParams)
        self.finish_within = p.finish_within
        import_extra("torch", extra="apps", needed_by=f"the {type(self).__name__} workload")
        os.makedirs(self.ctx.storage, exist_ok=True)
        self.fit: Fit | None = None
        self.thread = threading.Thread(target=self._fit, name="raychaos-library-fit", daemon=True)
        self.thread.start()
        wait_until(lambda: self._journal() or self.fit, timeout=self.finish_within, interval=0.1,
                   what=first)

    def launch(self) -> Any:
        """Build and run the library's experiment; returns its result (raises its error)."""
        raise NotImplementedError

    def _fit(self) -> None:
        start = time.monotonic()
        try:
            result = self.launch()
        except BaseException as exc:  # noqa: BLE001 - the verdicts say what it was
            self.fit = Fit(time.monotonic() - start, error=exc)
        else:
            self.fit = Fit(time.monotonic() - start, result=result)

    def step(self) -> bool:
        self.thread.join(timeout=min(0.5, self.ctx.remaining() + self.finish_within))
        self.ctx.count("polls")
        done = not self.thread.is_alive()
        if not done and self.ctx.over():  # the scenario's time is up: the fit has its bound more
            self.thread.join(timeout=self.finish_within)
            done = True
        return not done

    def _journal(self) -> list[dict[str, Any]]:
        try:
            with open(self.journal_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def kills(self) -> list[float]:
        """Wall times of the kills injected so far."""
        wall0 = time.time() - self.ctx.elapsed()  # the run's time zero on the wall clock
        return [wall0 + t for t in self.ctx.injections(FaultKind.KILL)]

    def finished(self, name: str) -> Verdict:
        fit = self.fit
        ok = fit is not None and fit.error is None
        return Verdict.of(name, ok, f"fit() returned after {fit.seconds:.1f} s" if fit and ok else
                       f"fit() raised {type(fit.error).__name__}: {str(fit.error)[:200]}" if fit
                       else "fit() never ended")

    #: The library's actors a fit that never ended leaves behind, killed at teardown.
    STRAY_CLASSES: tuple[str, ...] = ()

    def teardown(self) -> None:
        if self.thread.is_alive():  # a fit that hangs: end its actors, so nothing is left
            _kill_all_of(self.ctx.address, self.STRAY_CLASSES)

    def no_hang(self) -> Verdict:
        fit = self.fit
        return Verdict.of("no_hang", fit is not None, f"fit() ended after {fit.seconds:.1f} s" if fit
                       else f"fit() had not ended {self.finish_within:g} s after the scenario's end")


def _kill_all_of(address: str, classes: Sequence[str]) -> None:
    """SIGKILL every live actor of ``classes`` on the cluster."""
    from chaos import ActorTarget, Chaos, Kill
    from chaos.errors import TargetNotFound

    chaos = Chaos(address=address)
    for cls in classes:
        try:
            chaos.kill(Kill(ActorTarget(class_name=cls, pick="all")))
        except TargetNotFound:
            pass  # none left of that class


class TrainDDP(_LibraryRun):
    """A ``TorchTrainer`` with 2 workers on gloo, a checkpoint every epoch and
    ``FailureConfig(max_failures)``, its workers killed mid-epoch: the run finishes, each
    epoch runs to its end exactly once (resumed from the latest checkpoint, none lost, none
    redone), and the final weights equal a reference computed without Ray. With
    ``max_failures=0`` the kill must surface as ``TrainingFailedError``, and nothing hangs."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("worker_failure_recovered", "resumed_from_latest_checkpoint", "failure_surfaces")
    INVARIANTS = ("run_finishes", "worker_failure_recovered", "no_epoch_lost",
                  "resumed_from_latest_checkpoint", "no_reported_epoch_redone", "matches_fault_free",
                  "failure_surfaces", "no_hang")
    STRAY_CLASSES = (TRAIN_CONTROLLER_CLASS, TRAIN_WORKER_CLASS)
    loop = staticmethod(train_loop)
    Params = TrainParams

    def setup(self) -> None:
        p = self.ctx.params_as(TrainParams)
        self.config: dict[str, Any] = {"seed": self.ctx.seed, "lr": 0.05, "journal": f"{self.ctx.storage}/epochs.jsonl",
                       "epochs": p.epochs, "steps": p.steps, "pace": p.pace}
        self.max_failures = p.max_failures
        self.journal_path = self.config["journal"]
        # The worker group takes ~10 s to form here.
        self.start_fit(first="the first training epoch to start")

    def launch(self) -> Any:
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        return TorchTrainer(
            self.loop, train_loop_config=self.config, torch_config=TorchConfig(backend="gloo"),
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=RunConfig(name="train-ddp", storage_path=f"{self.ctx.storage}/train",
                                 failure_config=FailureConfig(max_failures=self.max_failures),
                                 callbacks=[train_taken_journal(self.journal_path)])).fit()

    def invariants(self) -> list[Verdict]:
        journal, fit, kills = self._journal(), self.fit, self.kills()
        resumed = [r.resumed_after for r in restarts(journal, kills) if r.resumed_after is not None]
        for i, seconds in enumerate(resumed):
            # Ray Train's recovery time: from the kill to the next attempt's first epoch.
            self.ctx.metric(f"training_resumed_{i + 1}_s", seconds)
        return [self.finished("run_finishes"), self._recovered(journal),
                *resume_verdicts(journal, kills, epochs=self.config["epochs"]),
                self._matches(fit), self._surfaces(fit), self.no_hang()]

    def _recovered(self, journal: list[dict[str, Any]]) -> Verdict:
        pids = [r["pid"] for r in journal if r["event"] != TAKEN]
        attempts = sorted(set(pids), key=pids.index)
        return Verdict.of("worker_failure_recovered", len(attempts) > 1,
                       f"{len(attempts)} training attempts (rank 0 processes {attempts}); a second one "
                       "means a worker died mid-run and Ray Train started the group again")

    def _matches(self, fit: Fit | None) -> Verdict:
        if fit is None or fit.result is None or fit.result.checkpoint is None:
            return Verdict.of("matches_fault_free", False, "no final checkpoint to compare")
        from safetensors.numpy import load_file

        with fit.result.checkpoint.as_directory() as folder:
            got = load_file(os.path.join(folder, "model.safetensors"))
        want = reference_weights(self.config["seed"], epochs=self.config["epochs"],
                                 steps=self.config["steps"], lr=self.config["lr"])
        gap = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
        return Verdict.of("matches_fault_free", gap <= 1e-4,
                       f"final weights differ from the reference run without Ray by at most {gap:.2e} "
                       "(tolerance 1e-4)")

    def _surfaces(self, fit: Fit | None) -> Verdict:
        from ray.train import TrainingFailedError

        error = fit.error if fit else None
        return Verdict.of("failure_surfaces", isinstance(error, TrainingFailedError),
                       f"fit() raised {type(error).__name__}: {str(error)[:200]}" if error else
                       "fit() raised nothing" if fit else "fit() never ended")



# -- Ray Tune: trials that fail and restore ------------------------------------------------------

#: What a killed Tune trial looks like to chaos: a function trainable's actor class.
TUNE_TRIAL_CLASS = "ImplicitFunc"


def expected_score(trial: int, iteration: int) -> int:
    return trial * 100 + iteration


def tune_trial(config: dict[str, Any]) -> None:
    """A function trainable: resume after the iteration its checkpoint holds, then per
    iteration a score and a checkpoint reported (each journaled, start and end)."""
    from ray import tune

    start, trial = _restored_iteration(tune.get_checkpoint()) + 1, config["trial"]
    for it in range(start, config["iterations"]):
        epoch_record(config["journal"], event="start", epoch=it, pid=os.getpid(), t=time.time(), trial=trial)
        threading.Event().wait(config["pace"])  # the iteration's length: room for a fault
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"iteration": it}, f)
            tune.report({"iteration": it, "score": expected_score(trial, it)},
                        checkpoint=tune.Checkpoint.from_directory(folder))
        epoch_record(config["journal"], event="end", epoch=it, pid=os.getpid(), t=time.time(), trial=trial)


def _restored_iteration(checkpoint: Any) -> int:
    if checkpoint is None:
        return -1
    with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
        return int(json.load(f)["iteration"])


class TuneTrials(_LibraryRun):
    """A Tune experiment of ``trials`` function trainables with a checkpoint every iteration and
    ``FailureConfig(max_failures)``; trial actors are killed: the experiment finishes, each
    trial restores from its latest checkpoint (no iteration lost), and the results table holds
    every trial with its right final score."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("trial_failure_recovered", "resumed_from_latest_checkpoint")
    INVARIANTS = ("experiment_finishes", "trial_failure_recovered", "no_iteration_lost",
                  "resumed_from_latest_checkpoint", "no_reported_iteration_redone",
                  "results_table_complete", "no_hang")
    STRAY_CLASSES = (TUNE_TRIAL_CLASS,)
    trainable = staticmethod(tune_trial)
    Params = TuneParams

    def setup(self) -> None:
        p = self.ctx.params_as(TuneParams)
        self.trials, self.max_failures = p.trials, p.max_failures
        self.config: dict[str, Any] = {"iterations": p.iterations, "journal": "", "pace": p.pace}
        self.journal_path = self.config["journal"] = f"{self.ctx.storage}/iterations.jsonl"
        self.start_fit(first="the first trial iteration to start")

    def launch(self) -> Any:
        from ray import tune

        space = {**self.config, "trial": tune.grid_search(list(range(self.trials)))}
        return tune.Tuner(
            tune.with_resources(self.trainable, {"cpu": 0.5}), param_space=space,
            run_config=tune.RunConfig(name="tune-trials", storage_path=f"{self.ctx.storage}/tune", verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=self.max_failures),
                                      callbacks=[tune_taken_journal(self.journal_path)])).fit()

    def invariants(self) -> list[Verdict]:
        journal, kills = self._journal(), self.kills()
        per_trial = {t: [r for r in journal if r["trial"] == t] for t in range(self.trials)}
        for t, records in per_trial.items():
            resumed_after = [r.resumed_after for r in restarts(records, kills) if r.resumed_after is not None]
            for i, seconds in enumerate(resumed_after):
                self.ctx.metric(f"trial{t}_resumed_{i + 1}_s", seconds)
        resumed = combined({f"trial {t}": resume_verdicts(records, kills, epochs=self.config["iterations"],
                                                           unit="iteration")
                            for t, records in per_trial.items()})
        attempts = {t: len({r["pid"] for r in records if r["event"] != TAKEN}) for t, records in per_trial.items()}
        return [self._finished(),
                Verdict.of("trial_failure_recovered", any(n > 1 for n in attempts.values()),
                        f"attempts per trial {attempts}; more than one means a trial's actor died and Tune "
                        "restored it"),
                *resumed, self._table(), self.no_hang()]

    def _finished(self) -> Verdict:
        """``fit()`` returned, and no trial ended in error (Tune reports those in the grid)."""
        verdict = self.finished("experiment_finishes")
        errors = list(self.fit.result.errors) if verdict.held and self.fit and self.fit.result else []
        if not errors:
            return verdict
        return Verdict.of("experiment_finishes", False, f"{verdict.detail}, but {len(errors)} trials ended in "
                       f"error: {[f'{type(e).__name__}: {str(e)[:120]}' for e in errors[:2]]}")

    def _table(self) -> Verdict:
        grid = self.fit.result if self.fit else None
        if grid is None:
            return Verdict.of("results_table_complete", False, "no result grid")
        last = self.config["iterations"] - 1
        rows = {r.config["trial"]: (r.metrics.get("iteration"), r.metrics.get("score"), r.error) for r in grid}
        wrong = {t: row for t, row in rows.items() if row != (last, expected_score(t, last), None)}
        missing = sorted(set(range(self.trials)) - set(rows))
        return Verdict.of("results_table_complete", not wrong and not missing,
                       f"{len(rows)} of {self.trials} trials in the table; wrong rows (iteration, score, "
                       f"error): {wrong or 'none'}; missing: {missing or 'none'}")


# -- RLlib: PPO with env runners that die and stall -------------------------------------------------

#: What a killed RLlib sampling actor looks like to chaos (the new API stack's env runner).
ENV_RUNNER_CLASS = "SingleAgentEnvRunner"


@dataclass(frozen=True, slots=True)
class Iteration:
    """One ``algo.train()`` as the driver saw it."""

    at: float  #: seconds into the run, when it returned
    seconds: float
    episode_return: float  #: NaN when no episode ended
    sampled: int  #: env steps sampled this iteration
    healthy: int  #: healthy remote env runners after it
    restarts: int  #: env-runner restarts so far (RLlib's count)
    error: str = ""


def _count(value: object) -> int:
    """A count from RLlib's results. After a runner's death RLlib may report NaN (or nothing)
    for it (CI: the iteration after a kill, in rllib-ppo-cartpole): that counts as none, which fails closed (no
    healthy runner, nothing sampled), where ``int(nan)`` ended the whole run."""
    number = float(value) if isinstance(value, numbers.Real) else float("nan")  # numpy scalars too
    return int(number) if math.isfinite(number) else 0


def restored_within(iterations: Sequence[Iteration], faults: Sequence[float], *, target: int,
                    bound: float, must_dip: bool = True) -> list[str]:
    """Each fault after which RLlib did not show a runner missing and then the healthy count
    back at ``target`` within ``bound`` seconds (judged on the iterations that ended in that
    time). ``must_dip``: a kill RLlib never noticed fails too, for an iteration that began
    before it may still count the dead runner healthy (a pause may go unnoticed)."""
    late, last = [], max((i.at for i in iterations), default=0.0)
    for fault in faults:
        after = [i for i in iterations if fault < i.at <= fault + bound]
        dip = next((n for n, i in enumerate(after) if i.healthy < target), None)
        back = not must_dip if dip is None else any(i.healthy == target for i in after[dip:])
        if not back:
            cut = f"; the run ended {last - fault:.1f} s after it" if last < fault + bound else ""
            seen = "" if dip is not None or not must_dip else "; RLlib never showed a runner missing"
            late.append(f"fault at {fault:.1f} s: healthy {[i.healthy for i in after] or 'no iteration'} "
                        f"within {bound:g} s (target {target}){seen}{cut}")
    return late


def recovery_times(iterations: Sequence[Iteration], faults: Sequence[float], *, target: int) -> list[float | None]:
    """For each fault: seconds until the healthy count was back at ``target`` after RLlib
    first showed it below (None: it never showed a runner missing, or never got it back)."""
    times: list[float | None] = []
    for fault in faults:
        after = [i for i in iterations if i.at > fault]
        dip = next((n for n, i in enumerate(after) if i.healthy < target), None)
        back = next((i.at for i in after[dip:] if i.healthy == target), None) if dip is not None else None
        times.append(None if back is None else back - fault)
    return times


def best_return(iterations: Sequence[Iteration]) -> float:
    """The best mean return of the last 10 iterations (NaN: no episode ended in them)."""
    returns = [i.episode_return for i in iterations[-10:] if not math.isnan(i.episode_return)]
    return max(returns, default=float("nan"))


def silent_drops(iterations: Sequence[Iteration], *, target: int) -> list[str]:
    """Iterations that sampled nothing while RLlib reported every runner healthy."""
    return [f"iteration at {i.at:.1f} s" for i in iterations if i.sampled == 0 and not i.error
            and i.healthy == target]


class RllibPPO(Workload):
    """PPO on CartPole-v1 with 2 env runners and ``restart_failed_env_runners``, one
    ``algo.train()`` per step; env runners are killed and paused past ``sample_timeout_s``:
    iterations keep completing, the healthy count comes back, nothing is dropped silently, and
    the mean return still reaches its target."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("runner_failure_recovered",)
    INVARIANTS = ("iterations_keep_completing", "runner_failure_recovered", "healthy_runners_restored",
                  "no_silent_empty_iteration", "return_reaches_target")
    RUNNERS = 2
    EXTRA = "apps"
    Params = RllibParams

    def setup(self) -> None:
        from ray.rllib.algorithms.ppo import PPOConfig

        import_extra("torch", extra="apps", needed_by="the rllib-ppo-cartpole workload")
        p = self.ctx.params_as(RllibParams)
        self.target, self.bound = p.target_return, p.restore_within
        config = (PPOConfig().environment("CartPole-v1")
                  .env_runners(num_env_runners=self.RUNNERS, num_cpus_per_env_runner=0.5,
                               sample_timeout_s=p.sample_timeout_s)
                  .fault_tolerance(restart_failed_env_runners=p.restart_failed_env_runners)
                  .training(train_batch_size_per_learner=1000, minibatch_size=250, num_epochs=6, lr=3e-4)
                  .debugging(seed=self.ctx.seed))
        self.algo = config.build_algo()
        self.iterations: list[Iteration] = []

    def step(self) -> bool:
        start = time.monotonic()
        try:
            result = self.algo.train()
        except Exception as exc:  # noqa: BLE001 - an iteration that fails is the finding
            self.iterations.append(Iteration(at=self.ctx.elapsed(), seconds=time.monotonic() - start,
                                             episode_return=float("nan"), sampled=0, healthy=0, restarts=0,
                                             error=f"{type(exc).__name__}: {exc}"[:200]))
            return False
        runners, tolerance = result.get("env_runners", {}), result.get("fault_tolerance", {})
        done = Iteration(at=self.ctx.elapsed(), seconds=time.monotonic() - start,
                         episode_return=float(runners.get("episode_return_mean", float("nan"))),
                         sampled=_count(runners.get("num_env_steps_sampled")),
                         healthy=_count(tolerance.get("num_healthy_workers")),
                         restarts=_count(tolerance.get("num_remote_worker_restarts")))
        self.iterations.append(done)
        self.ctx.count("iterations")
        if done.episode_return == done.episode_return:  # not NaN
            self.ctx.point("episode_return_mean", done.episode_return)
        return not self._finished(done)

    def _finished(self, last: Iteration) -> bool:
        """The work is done, not the clock: the return reached, every fault played out and
        both runners back. A slow machine gets more time (up to the scenario's duration)
        instead of a verdict on fewer iterations."""
        return (best_return(self.iterations) >= self.target and self.ctx.faults_settled.is_set()
                and last.healthy == self.RUNNERS and not self._late())

    def _late(self) -> list[str]:
        """Faults the healthy count did not come back from in time: kills RLlib must have seen."""
        its, kills = self.iterations, self.ctx.injections(FaultKind.KILL)
        pauses = self.ctx.injections(FaultKind.PAUSE)
        return (restored_within(its, kills, target=self.RUNNERS, bound=self.bound)
                + restored_within(its, pauses, target=self.RUNNERS, bound=self.bound, must_dip=False))

    def probe(self) -> str:
        """Both runners answer a ping *and* RLlib counts both healthy. RLlib counts a killed
        runner healthy until its next call to it fails, and the State API learns of a death
        late too: either alone timed recoveries that had not begun (MTTR 0.05 s for a kill
        RLlib took 18 s to restore)."""
        healthy, answers = self.algo.env_runner_group.num_healthy_remote_workers(), self._pings()
        if healthy < self.RUNNERS or answers != ["pong"] * self.RUNNERS:
            raise RuntimeError(f"{healthy} of {self.RUNNERS} env runners healthy to RLlib; "
                               f"their answers to a ping: {answers}")
        return f"{healthy} healthy env runners"

    def _pings(self) -> list[str]:
        """Each remote env runner's answer to a ping, or the error's type. RLlib's env
        runners are not retried, so a call to a dead one fails fast."""
        import ray

        handles = self.algo.env_runner_group._worker_manager.actors()  # RLlib 2.60: id -> handle
        refs = [handle.ping.remote() for _, handle in sorted(handles.items())]
        answers = []
        for ref in refs:
            try:
                answers.append(str(ray.get(ref, timeout=PING_TIMEOUT)))
            except Exception as exc:  # noqa: BLE001 - the error is the answer
                answers.append(type(exc).__name__)
        return answers

    def invariants(self) -> list[Verdict]:
        its, kills = self.iterations, self.ctx.injections(FaultKind.KILL) + self.ctx.injections(FaultKind.PAUSE)
        errors = [i.error for i in its if i.error]
        late = self._late()
        silent = silent_drops(its, target=self.RUNNERS)
        restarts = max((i.restarts for i in its), default=0)  # the last may not report it (NaN)
        best = best_return(its)
        if its:  # how RLlib carried the faults: its slowest iteration, its fewest healthy runners
            self.ctx.metric("slowest_iteration_s", max(i.seconds for i in its))
            self.ctx.metric("fewest_healthy_runners", min(i.healthy for i in its))
        for n, took in enumerate(recovery_times(its, sorted(kills), target=self.RUNNERS)):
            if took is not None:  # RLlib's MTTR: the fault until both runners are healthy again
                self.ctx.metric(f"runners_restored_{n + 1}_s", took)
        return [Verdict.of("iterations_keep_completing", bool(its) and not errors,
                        f"{len(its)} iterations; failed: {errors[:2] or 'none'}"),
                Verdict.of("runner_failure_recovered", restarts > 0,
                        f"RLlib restarted env runners {restarts} times"),
                Verdict.of("healthy_runners_restored", bool(its) and not late and its[-1].healthy == self.RUNNERS,
                        f"healthy at the end: {its[-1].healthy if its else 'n/a'} of {self.RUNNERS}; "
                        f"not restored within {self.bound:g} s: {late or 'none'}"),
                Verdict.of("no_silent_empty_iteration", bool(its) and not silent,
                        f"iterations that sampled nothing with every runner reported healthy: {silent or 'none'}; "
                        f"fewest steps sampled: {min((i.sampled for i in its), default=0)}"),
                Verdict.of("return_reaches_target", best >= self.target,
                        f"best mean return of the last 10 iterations {best:.1f} (target {self.target:g})")]

    def teardown(self) -> None:
        self.algo.stop()
