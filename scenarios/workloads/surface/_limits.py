"""OS limits: an actor out of open files."""

from __future__ import annotations

import errno
import os

from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Workload

__all__ = ["OpenFiles", "Opener"]


class Opener:
    """Opens, writes and closes a file per call."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def touch(self, i: int) -> int:
        with open(os.path.join(self.folder, f"f{i % 8}"), "w") as f:
            f.write(str(i))
        return i

    def pid(self) -> int:
        return os.getpid()


class OpenFiles(Workload):
    """An actor's open-file limit is cut to what it holds: its next open fails with EMFILE,
    which must reach the caller through ``ray.get`` as that OSError; once healed it opens again."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("emfile_surfaces",)
    INVARIANTS = ("emfile_surfaces", "recovers_after_heal", "no_other_errors")
    opener_class: type = Opener

    def setup(self) -> None:
        import ray

        self.opener = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.opener_class).options(
            name="opener", namespace=self.ctx.namespace).remote(f"{self.ctx.storage}/files")
        ray.get(self.opener.pid.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls
        self.ok, self.emfile, self.i = 0, 0, 0
        self.other: list[str] = []

    def step(self) -> bool:
        import ray

        try:
            ray.get(self.opener.touch.remote(self.i), timeout=CALL_TIMEOUT)
            self.ok += 1
        except OSError as exc:  # RayTaskError(OSError): the errno is on the cause
            cause = getattr(exc, "cause", exc)
            if getattr(cause, "errno", None) == errno.EMFILE:
                self.emfile += 1
            else:
                self.other.append(f"{type(cause).__name__}: {cause}"[:120])
        except Exception as exc:  # noqa: BLE001 - any other error is a finding
            self.other.append(f"{type(exc).__name__}: {exc}"[:120])
        self.i += 1
        self.ctx.count("opens")
        self.ctx.stop.wait(0.01)  # the workload's pace
        return True

    def probe(self) -> str:
        import ray

        return f"opened f{ray.get(self.opener.touch.remote(0), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        try:
            after = f"a file opened after the heal ({ray.get(self.opener.touch.remote(1), timeout=CALL_TIMEOUT)})"
            healed = True
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            after, healed = f"still failing after the heal: {type(exc).__name__}: {exc}"[:200], False
        return [Verdict.of("emfile_surfaces", self.emfile > 0,
                        f"{self.emfile} calls raised OSError(EMFILE) through ray.get; {self.ok} succeeded"),
                Verdict.of("recovers_after_heal", healed, after),
                Verdict.over("no_other_errors", self.i, held=not self.other,
                             detail=f"{len(self.other)} of {self.i} calls raised another error: "
                             f"{self.other[:3] or 'none'}")]

    def teardown(self) -> None:
        import ray

        ray.kill(self.opener)
