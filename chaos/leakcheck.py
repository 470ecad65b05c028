"""``python -m chaos.leakcheck``: fail when Ray, Redis, paused or fault-filesystem processes,
processes or reapers of raychaos drivers that have ended, fault filesystems or capped tmpfs
still mounted, or the network lab's namespaces, links, bridges or nftables tables, are left on
the machine.

Run after a test suite or a chaos run. Processes that are exiting get a grace period
(``--grace`` seconds, 30 by default; polled, bounded); anything still there is listed and the
exit code is 1.
"""

from __future__ import annotations

import argparse
import sys
import time

import psutil

from chaos._reclaim._cleanup import orphaned_processes
from chaos.cluster._cluster import ray_processes
from chaos.disks._capped import capped_mounts
from chaos.disks._fusefs import fuse_mounts_left, fuse_servers_left
from chaos.net._lab import network_leftovers


def paused_processes() -> list[psutil.Process]:
    """Processes in state T (stopped) that are Python or Ray: a straggler fault not healed."""
    found = []
    for proc in psutil.process_iter(["status", "name", "cmdline"]):
        text = (proc.info["name"] or "") + " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] == psutil.STATUS_STOPPED and ("ray" in text or "python" in text):
            found.append(proc)
    return found


def redis_processes() -> list[psutil.Process]:
    """Running ``redis-server`` processes: the harness starts one per GCS-fault-tolerant
    cluster and must stop it (a system Redis the user runs would be listed too)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        if (proc.info["name"] or "").startswith("redis-server") and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def leftovers(*, grace: float = 30.0) -> list[psutil.Process]:
    """Ray, Redis, paused and fault-filesystem processes, and those of ended raychaos drivers
    (their labelled processes, their reapers), still present after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        found = ray_processes() + redis_processes() + paused_processes() + fuse_servers_left() + orphaned_processes()
        left = list({proc.pid: proc for proc in found}.values())
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)  # polling a condition under a deadline


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.leakcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                        help="how long exiting processes may take to go (default 30)")
    grace = parser.parse_args(argv).grace
    left, network, mounts, capped = leftovers(grace=grace), network_leftovers(), fuse_mounts_left(), capped_mounts()
    if not left and not network and not mounts and not capped:
        print("leakcheck: 0 Ray processes, 0 Redis processes, 0 paused processes, "
              "0 network namespaces, links, bridges or nftables tables, 0 fault filesystems, 0 capped tmpfs")
        return 0
    for mount in mounts:
        print(f"leakcheck: a fault filesystem is still mounted at {mount} (fusermount3 -u -z {mount})",
              file=sys.stderr)
    for point in capped:
        print(f"leakcheck: a capped tmpfs is still mounted at {point} (umount -l {point})", file=sys.stderr)
    if left:
        print(f"leakcheck: {len(left)} Ray, Redis, paused or fault-filesystem processes left behind:",
              file=sys.stderr)
    for proc in left:
        print(f"  {_describe(proc)}", file=sys.stderr)
    if network:
        print(f"leakcheck: {len(network)} network objects left behind (delete them with ip/nft):",
              file=sys.stderr)
    for item in network:
        print(f"  {item}", file=sys.stderr)
    print("leakcheck: `raychaos cleanup` removes what drivers that ended left (`--dry-run` lists it)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
