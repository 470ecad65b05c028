"""The parameter server's errors and results (the server is exported by ``actors``)."""

from actors._param_server import GradientError, PushResult, ServerStats, StaleGradientError, VersionTimeout

__all__ = ["GradientError", "PushResult", "ServerStats", "StaleGradientError", "VersionTimeout"]
