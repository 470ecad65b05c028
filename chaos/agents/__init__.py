"""The per-node chaos agents: the actor on each node that injects a fault there and heals it on
its own deadline, even when the driver dies."""

from chaos.agents._agent import AGENT_START_TIMEOUT, ChaosAgent, agent_for, start_agents, stop_agents

__all__ = ["AGENT_START_TIMEOUT", "ChaosAgent", "agent_for", "start_agents", "stop_agents"]
