"""Each lesson's mistake and fix as code, shown side by side by ``raychaos explain ID``.

The snippets are what a reader writes, reduced to the lines that differ; the measurement that
runs them lives with the lesson (``scenarios._lessons_*``). A test parses every snippet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CODE", "LessonCode"]


@dataclass(frozen=True, slots=True)
class LessonCode:
    """A lesson's mistake and its fix, as Python."""

    mistake: str
    fix: str


CODE: Mapping[str, LessonCode] = {
    "01-global-state": LessonCode(
        mistake="""\
COUNTER = {"value": 0}

@ray.remote
def bump(n):
    COUNTER["value"] += n  # the worker's copy

ray.get([bump.remote(1) for _ in range(20)])
print(COUNTER["value"])  # 0 on the driver""",
        fix="""\
@ray.remote
def part(n):
    return n  # return what you computed

total = sum(ray.get([part.remote(1) for _ in range(20)]))
print(total)  # 20"""),
    "02-num-cpus": LessonCode(
        mistake="""\
@ray.remote  # num_cpus=1 by default
def fetch(url):
    return requests.get(url).text

ray.get([fetch.remote(u) for u in urls])""",
        fix="""\
@ray.remote(num_cpus=0.5)  # mostly waiting on I/O
def fetch(url):
    return requests.get(url).text

ray.get([fetch.remote(u) for u in urls])"""),
    "03-eager-get": LessonCode(
        mistake="""\
results = []
for i in range(6):
    results.append(ray.get(f.remote(i)))  # waits each time""",
        fix="""\
refs = [f.remote(i) for i in range(6)]  # all submitted
results = ray.get(refs)"""),
    "04-blocking-method": LessonCode(
        mistake="""\
@ray.remote
class Service:
    def slow(self):
        time.sleep(2)
    def ping(self):
        return "pong"  # queued behind slow()""",
        fix="""\
@ray.remote
class Service:
    async def slow(self):
        await asyncio.sleep(2)
    async def ping(self):
        return "pong"  # answers meanwhile"""),
    "05-leaked-actors": LessonCode(
        mistake="""\
workers = [Worker.remote() for _ in range(2)]
ray.get([w.run.remote() for w in workers])
# done, but the actors keep their CPUs""",
        fix="""\
workers = [Worker.remote() for _ in range(2)]
ray.get([w.run.remote() for w in workers])
for w in workers:
    ray.kill(w)  # resources back to the cluster"""),
    "06-restarts-without-state": LessonCode(
        mistake="""\
@ray.remote(max_restarts=1)
class Counter:
    def __init__(self):
        self.value = 0  # lost when the process dies
    def add(self, n):
        self.value += n""",
        fix="""\
from actors import CheckpointedCounter

Counter = ray.remote(max_restarts=1)(CheckpointedCounter)
counter = Counter.remote(storage, durability="wal")
ray.get(counter.add.remote(1))  # logged before it is acknowledged"""),
    "07-get-then-put": LessonCode(
        mistake="""\
x = ray.get(ref)  # copied into the driver
task.remote(ray.put(x))  # and back into the store""",
        fix="""\
task.remote(ref)  # Ray passes the object itself"""),
    "08-held-refs": LessonCode(
        mistake="""\
refs = [make_block.remote(i) for i in range(10)]
total = sum(len(b) for b in ray.get(refs))
# refs still held: the store keeps every block""",
        fix="""\
refs = [make_block.remote(i) for i in range(10)]
total = sum(len(b) for b in ray.get(refs))
del refs  # the store may free the blocks"""),
    "09-get-in-loop": LessonCode(
        mistake="""\
values = [ray.get(r) for r in refs]  # one round trip each""",
        fix="""\
values = ray.get(refs)  # one call for all"""),
    "10-driver-bottleneck": LessonCode(
        mistake="""\
for value in ray.get(refs):  # waits for the slowest
    process(value)""",
        fix="""\
pending = list(refs)
while pending:
    [done], pending = ray.wait(pending, num_returns=1)
    process(ray.get(done))  # as each lands"""),
    "11-no-timeout": LessonCode(
        mistake="""\
values = ray.get(refs)  # a straggler: waits forever""",
        fix="""\
pending = list(refs)
while pending:
    done, pending = ray.wait(pending, timeout=0.5)
    handle(ray.get(done))
    report_if_stuck(pending)  # chaos.watch names it"""),
    "12-get-raises-first": LessonCode(
        mistake="""\
values = ray.get(refs)  # one task raised: every value lost""",
        fix="""\
pending = list(refs)
while pending:
    [done], pending = ray.wait(pending, num_returns=1)
    try:
        values.append(ray.get(done))
    except ray.exceptions.RayTaskError as exc:
        errors.append(exc)"""),
    "13-undeclared-gpu": LessonCode(
        mistake="""\
@ray.remote  # num_cpus=1: competes with env tasks
def train(batch):
    return model_on_gpu(batch)""",
        fix="""\
@ray.remote(num_gpus=1, num_cpus=0)
def train(batch):
    return model_on_gpu(batch)"""),
    "14-over-request": LessonCode(
        mistake="""\
@ray.remote(num_cpus=2)  # asks for more than it uses
def fetch(url):
    return requests.get(url).text""",
        fix="""\
@ray.remote(num_cpus=0.5)  # what it uses
def fetch(url):
    return requests.get(url).text"""),
    "15-placement-groups": LessonCode(
        mistake="""\
learner = Learner.remote()
sampler = Sampler.remote()  # anywhere Ray likes""",
        fix="""\
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
ray.get(pg.ready())
on_pg = PlacementGroupSchedulingStrategy(placement_group=pg)
learner = Learner.options(scheduling_strategy=on_pg).remote()
sampler = Sampler.options(scheduling_strategy=on_pg).remote()"""),
    "16-wait-num-returns": LessonCode(
        mistake="""\
while refs:
    done_refs, refs = ray.wait(refs, num_returns=10, timeout=5)
    results += ray.get(done_refs)""",
        fix="""\
while refs:
    done_refs, refs = ray.wait(refs, num_returns=min(10, len(refs)), timeout=5)
    for ref in done_refs:
        results.append(ray.get(ref))"""),
    "17-dynamic-batching": LessonCode(
        mistake="""\
while pending:
    ready, pending = ray.wait(pending, num_returns=4, timeout=0.1)
    serve(ray.get(ready))""",
        fix="""\
while pending:
    ready, pending = ray.wait(pending, num_returns=min(4, len(pending)), timeout=0.1)
    serve(ray.get(ready))"""),
    "18-actor-without-restarts": LessonCode(
        mistake="""\
@ray.remote  # max_restarts=0: one death is final
class Counter: ...

counter = Counter.remote()
# its process is SIGKILLed
ray.get(counter.add.remote(1))  # ActorDiedError""",
        fix="""\
@ray.remote(max_restarts=-1, max_task_retries=-1)
class Counter: ...

counter = Counter.remote()
# its process is SIGKILLed
ray.get(counter.add.remote(1))  # answered by the restart"""),
    "19-calls-in-flight": LessonCode(
        mistake="""\
@ray.remote(max_restarts=-1)  # comes back...
class Counter: ...

refs = [counter.add.remote(1) for _ in range(10)]
# killed with the calls queued: each raises""",
        fix="""\
@ray.remote(max_restarts=-1, max_task_retries=-1)
class Counter: ...

refs = [counter.add.remote(1) for _ in range(10)]
# killed with the calls queued: resent, answered"""),
    "20-exceptions-not-retried": LessonCode(
        mistake="""\
@ray.remote(max_retries=3)  # for crashes only
def load(key):
    return store.read(key)  # ConnectionError: raised""",
        fix="""\
@ray.remote(max_retries=3, retry_exceptions=[ConnectionError])
def load(key):
    return store.read(key)  # retried on a blip"""),
    "21-side-effect-twice": LessonCode(
        mistake="""\
@ray.remote(max_retries=3)
def charge(key):
    ledger.append(key)  # done again by the retry
    finish_the_work()""",
        fix="""\
@ray.remote(max_retries=3)
def charge(key):
    if key not in ledger:  # idempotent: once per key
        ledger.append(key)
    finish_the_work()"""),
    "22-method-applied-twice": LessonCode(
        mistake="""\
@ray.remote(max_restarts=-1, max_task_retries=-1)
class Account:  # durable: its log survives a restart
    def deposit(self, key):
        self.log.append(key)  # resent call: again
        return reply()""",
        fix="""\
@ray.remote(max_restarts=-1, max_task_retries=-1)
class Account:
    def deposit(self, key):
        if key not in self.log:  # a repeat is ignored
            self.log.append(key)
        return reply()"""),
    "23-get-without-timeout": LessonCode(
        mistake="""\
ref = service.answer.remote()
value = ray.get(ref)  # the process froze: waits forever""",
        fix="""\
ref = service.answer.remote()
try:
    value = ray.get(ref, timeout=2)
except ray.exceptions.GetTimeoutError:
    ...  # retry elsewhere, report, give up"""),
    "24-owner-died": LessonCode(
        mistake="""\
@ray.remote
class Producer:
    def make(self):
        return [ray.put(big_value)]  # the actor owns it

[ref] = ray.get(producer.make.remote())
# the producer dies: ray.get(ref) -> OwnerDiedError""",
        fix="""\
@ray.remote
class Producer:
    def make(self):
        return big_value  # the caller owns the result

ref = producer.make.remote()
# the producer dies: ray.get(ref) still answers"""),
    "25-detached-leak": LessonCode(
        mistake="""\
cache = Cache.options(name="cache", lifetime="detached").remote()
# the driver exits: the cache stays, holding its resources""",
        fix="""\
cache = Cache.options(name="cache").remote()
# the driver exits: the cache ends with its job"""),
    "t1-batches": LessonCode(
        mistake="""\
values = ray.get(refs)  # 120 MiB in the driver at once
for v in values:
    process(v)""",
        fix="""\
pending = list(refs)
while pending:
    done, pending = ray.wait(pending, num_returns=min(10, len(pending)))
    for v in ray.get(done):
        process(v)  # then dropped"""),
    "t2-max-retries-0": LessonCode(
        mistake="""\
@ray.remote(max_retries=-1)  # a crash retried without end
def step():
    crash_the_worker()""",
        fix="""\
@ray.remote(max_retries=0)
def step():
    crash_the_worker()

try:
    ray.get(step.remote())
except ray.exceptions.WorkerCrashedError:
    ...  # surfaces at once"""),
}
