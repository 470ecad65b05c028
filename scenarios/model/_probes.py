"""An experiment's probes: what must keep working while the program is attacked.

A probe is one of three records, each a ``[[probes]]`` table of an attack file (``kind`` names
which) and a ``--probe``/``--probe-python``/``--probe-http`` option of ``raychaos attack`` and
``run --job``: a shell command (passes on exit status 0), a Python callable (passes unless it
raises or returns False) or an HTTP request (passes on the expected status, with the expected
text in the answer's body). Each runs with a deadline: a probe blocked on a paused service fails
after its timeout instead of hanging the attack.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from scenarios.model._bounded import CallHang, bounded
from scenarios.model._records import Problem
from scenarios.model._tables import did_you_mean

__all__ = ["PROBE_CLASSES", "CommandProbe", "HttpProbe", "ProbeKind", "PythonProbe", "UserProbe", "probe_from",
           "probe_param", "probe_problems", "probes_problems"]

HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
#: Characters of a probe's output kept in its result.
SAID = 200


class ProbeKind(StrEnum):
    COMMAND = "command"  #: a shell command; passes on exit status 0
    PYTHON = "python"  #: ``module:function``; passes unless it raises or returns False
    HTTP = "http"  #: an HTTP request; passes on the expected status and body


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandProbe:
    """A shell command: passes when it exits with status 0 within the probe timeout."""

    KIND: ClassVar[ProbeKind] = ProbeKind.COMMAND
    command: str

    @property
    def label(self) -> str:
        return self.command

    def run(self, *, timeout: float) -> tuple[bool, str]:
        """Whether it passed, and what it said."""
        try:
            out = subprocess.run(self.command, shell=True, capture_output=True, text=True, timeout=timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            return False, f"still running after {timeout:g} s"
        said = (out.stdout + out.stderr).strip()[-SAID:]
        return out.returncode == 0, f"exit {out.returncode}" + (f": {said}" if said else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonProbe:
    """A Python callable, `module:function`, imported from the directory the attack runs in and
    called with no argument: passes unless it raises or returns False within the probe timeout."""

    KIND: ClassVar[ProbeKind] = ProbeKind.PYTHON
    call: str

    @property
    def label(self) -> str:
        return self.call

    def run(self, *, timeout: float) -> tuple[bool, str]:
        """Call it with the probe's deadline. A call that overruns it cannot be killed (it is a
        thread) and is left to finish on its own (see :func:`bounded`)."""
        module, _, name = self.call.partition(":")
        if os.getcwd() not in sys.path:  # as `python -m` has it: the user's own modules import
            sys.path.insert(0, os.getcwd())
        try:
            answer = bounded(lambda: getattr(importlib.import_module(module), name)(), what=self.call,
                             seconds=timeout)
        except CallHang:
            return False, f"still running after {timeout:g} s"
        except Exception as exc:  # noqa: BLE001 - a failing probe is the finding, not a crash
            return False, f"{type(exc).__name__}: {exc}"[:SAID]
        return answer is not False, repr(answer)[:SAID]


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpProbe:
    """An HTTP request: passes when the answer comes within the probe timeout with the expected
    `status` and, when `body` is set, that text in its body."""

    KIND: ClassVar[ProbeKind] = ProbeKind.HTTP
    url: str
    method: HttpMethod = "GET"
    status: int = 200
    #: Text the answer's body must contain ("" checks no body).
    body: str = ""
    #: The request's body (for POST, PUT, PATCH).
    data: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.method} {self.url}"

    def run(self, *, timeout: float) -> tuple[bool, str]:
        request = urllib.request.Request(self.url, data=self.data.encode() if self.data else None,
                                         headers=self.headers, method=self.method)
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, text = answer.status, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:  # an answer all the same: its status is judged
            status, text = exc.code, exc.read().decode(errors="replace")
        except (OSError, ValueError) as exc:
            return False, f"no answer: {type(exc).__name__}: {exc}"[:SAID]
        took = f"{status} in {1000 * (time.perf_counter() - start):.0f} ms"
        if status != self.status:
            return False, f"{took}, expected {self.status}: {text.strip()[:SAID]}"
        if self.body and self.body not in text:
            return False, f"{took}, body without {self.body!r}: {text.strip()[:SAID]}"
        return True, took


UserProbe = CommandProbe | PythonProbe | HttpProbe
PROBE_CLASSES: dict[ProbeKind, type[UserProbe]] = {c.KIND: c for c in (CommandProbe, PythonProbe, HttpProbe)}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def probe_from(raw: Mapping[str, object]) -> UserProbe:
    """The probe a valid table describes (:func:`probe_problems` found nothing in it)."""
    cls = PROBE_CLASSES[ProbeKind(str(raw["kind"]))]
    return cls(**{k: v for k, v in raw.items() if k != "kind"})  # type: ignore[arg-type]


def probe_param(probe: UserProbe) -> dict[str, object]:
    """A probe as its ``[[probes]]`` table (and the attack workload's ``params.probes`` entry)."""
    return {"kind": probe.KIND.value, **dataclasses.asdict(probe)}


def probe_problems(raw: object, where: str) -> list[Problem]:
    """Every problem of one ``[[probes]]`` table at ``where`` (``probes[0]``)."""
    if not isinstance(raw, Mapping):
        return [Problem(where, raw, 'a probe is a table: { kind = "command", command = "..." }')]
    kinds = [k.value for k in ProbeKind]
    kind = raw.get("kind")
    if kind not in kinds:
        return [Problem(f"{where}.kind", kind, f"{did_you_mean(str(kind), kinds)}a probe's kind is one of "
                                              f"{', '.join(kinds)}")]
    cls = PROBE_CLASSES[ProbeKind(str(kind))]
    names = {f.name: f for f in dataclasses.fields(cls)}
    problems = [Problem(f"{where}.{k}", raw[k], f"unknown field; {did_you_mean(k, sorted(names))}{_a(kind)} "
                                                f"probe holds {', '.join(sorted(names))}")
                for k in sorted(set(raw) - set(names) - {"kind"})]
    problems += [Problem(f"{where}.{n}", None, f"required for {_a(kind)} probe") for n, f in names.items()
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and n not in raw]
    return problems + _value_problems(cls, raw, where)


def _a(kind: object) -> str:
    return f"an {kind}" if str(kind)[:1] in "aeiouh" else f"a {kind}"


def _value_problems(cls: type[UserProbe], raw: Mapping[str, object], where: str) -> list[Problem]:
    """What a present field's value gets wrong."""
    problems = []
    for name in ("command", "call", "url", "body", "data", "method"):
        if name in raw and not isinstance(raw[name], str):
            problems.append(Problem(f"{where}.{name}", raw[name], "a string"))
    call, url, method = raw.get("call"), raw.get("url"), raw.get("method", "GET")
    if cls is PythonProbe and isinstance(call, str) and ":" not in call:
        problems.append(Problem(f"{where}.call", call, "use MODULE:FUNCTION, e.g. myapp.health:check"))
    if cls is HttpProbe and isinstance(url, str) and not url.startswith(("http://", "https://")):
        problems.append(Problem(f"{where}.url", url, "an http:// or https:// URL, e.g. http://127.0.0.1:8000/health"))
    if cls is HttpProbe and method not in _METHODS:
        problems.append(Problem(f"{where}.method", method, f"one of {', '.join(_METHODS)}"))
    status = raw.get("status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        problems.append(Problem(f"{where}.status", status, "an HTTP status from 100 to 599"))
    headers = raw.get("headers", {})
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        problems.append(Problem(f"{where}.headers", headers, 'a table of strings: { Authorization = "Bearer ..." }'))
    return problems


def probes_problems(raw: object) -> list[Problem]:
    """Every problem of an attack file's ``probes`` array."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return [Problem("probes", raw, 'an array of tables: [[probes]] kind = "http" url = "..."')]
    return [p for i, entry in enumerate(raw) for p in probe_problems(entry, f"probes[{i}]")]
