"""A long-running Ray program to attack: a named counter actor, called in a loop, and a health
endpoint that calls it. `raychaos attack` kills the actor; the probe says whether the program
still serves."""

import http.server
import sys
import threading
import time

import ray

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8000

ray.init(address="auto", namespace="app", log_to_driver=False)


# A liveness check, not a ledger: its count restarts from 0 with the actor, and a call Ray
# delivers again after a kill counts twice (see actors.Checkpointable and @mutation(idempotent=True)
# for state that must survive and count once).
@ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


counter = Counter.options(name="counter").remote()


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # a live call through the actor, not a cached answer
        try:
            ray.get(counter.incr.remote(), timeout=2)
            self.send_response(200)
        except ray.exceptions.RayError:  # a failed or timed-out call: unhealthy
            self.send_response(503)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
while True:  # the program's own work
    try:
        ray.get(counter.incr.remote(), timeout=10)
    except ray.exceptions.RayError as exc:
        print("call failed:", type(exc).__name__, flush=True)
    time.sleep(0.1)
