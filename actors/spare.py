"""The spare worker behind :func:`actors.keep_spare`: its state, its error and the runtime
environments that preload it."""

from actors._spare import SpareState, SpareWorkerError, spare_actor_env, spare_job_env

__all__ = ["SpareState", "SpareWorkerError", "spare_actor_env", "spare_job_env"]
