"""The reaper process of a driver (:mod:`chaos._reclaim._reaper`): what undoes each kind of claim, and its
entry point. Apart from the claims' side so that the modules that claim (the network lab, the
fault filesystem, the capped tmpfs, the cluster) import the claims, and only this imports them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from chaos._reclaim._owner import Owner, TeardownFailed, remove_folder, undo_all
from chaos._reclaim._reaper import _ENTRY, Claim, ClaimKind, read_claims

__all__ = ["UNDO", "main", "reclaim"]


def _undo_netlab(name: str, workers: str) -> None:
    from chaos.net._lab import destroy_lab

    destroy_lab(name, int(workers))


def _undo_faultfs(mount: str) -> None:
    from chaos.disks._fusefs import reclaim_mount

    reclaim_mount(mount)


def _undo_tmpfs(mount: str) -> None:
    from chaos.disks._capped import release_capped

    release_capped(mount)


def _undo_ray_session(temp_dir: str) -> None:
    """Kill every process whose command line names ``temp_dir`` (the cluster's own, and only it).

    Raises:
        TeardownFailed: some still run after the kill's bound (each named).
    """
    from chaos._reclaim._owner import kill_all, processes_naming

    left = kill_all(processes_naming(temp_dir))
    if left:
        raise TeardownFailed(f"the Ray processes under {temp_dir}",
                             [ProcessLookupError(f"pid {pid} still runs after SIGKILL") for pid in left])


UNDO: dict[ClaimKind, Callable[..., None]] = {
    ClaimKind.NETLAB: _undo_netlab,
    ClaimKind.FAULTFS: _undo_faultfs,
    ClaimKind.TMPFS: _undo_tmpfs,
    ClaimKind.FOLDER: remove_folder,
    ClaimKind.RAY_SESSION: _undo_ray_session,
}


def reclaim(held: Sequence[Claim], *, owner: str) -> None:
    """Undo every claim in ``held``, newest first, saying what each reclaimed.

    Raises:
        TeardownFailed: some could not be undone (each one is in it; the others were).
    """
    def step(item: Claim) -> Callable[[], None]:
        def undo() -> None:
            UNDO[item.kind](*item.args)
            print(f"raychaos reaper: the driver {owner} ended without undoing {item}: reclaimed it",
                  file=sys.stderr, flush=True)
        return undo

    undo_all(f"raychaos reaper of the driver {owner}", [step(item) for item in reversed(held)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -c '{_ENTRY}'", description=__doc__.splitlines()[0])
    parser.add_argument("--owner", required=True, help="the driver, as PID:START (its start time in ticks)")
    args = parser.parse_args(argv)
    held = read_claims(Owner.parse(args.owner))
    try:
        reclaim(held, owner=args.owner)
    except TeardownFailed as exc:
        print(f"{exc}\n(`raychaos cleanup` removes what is left once the cause is fixed)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
