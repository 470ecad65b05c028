"""``python -m chaos.agents._healer PID CREATE_TIME DEADLINE``: resume a paused process at its deadline.

Started by the agent, in its own session, for every pause: if the agent, the driver or
the whole job dies mid-pause, this process still sends SIGCONT when the pause's time is
up, so no fault outlives its bound. It checks the process's creation time first, so a
reused PID is never signalled.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil


def heal_at(pid: int, create_time: float, deadline: float) -> None:
    while (left := deadline - time.time()) > 0:
        time.sleep(min(left, 0.5))  # a bounded wait for the pause's own deadline
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) < 1.0:  # psutil builds may round differently
            proc.send_signal(signal.SIGCONT)
    except psutil.NoSuchProcess:
        pass


if __name__ == "__main__":
    os.setsid() if os.getsid(0) != os.getpid() else None
    heal_at(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
