"""The network lab beneath ``local_cluster(network=True)``: a bridge and a network namespace per
worker node, each with its own link and address, so that network faults cut, thin or slow
real links. A workload reads the lab of its cluster (:func:`lab_of`), runs a lab command in a
node's namespace (:func:`run`) and ends what runs in a node's namespace (:func:`kill_node_processes`)."""

from chaos.net._lab import COMMAND_TIMEOUT, NetLab, NetNode, kill_node_processes, lab_of, run

__all__ = ["COMMAND_TIMEOUT", "NetLab", "NetNode", "kill_node_processes", "lab_of", "run"]
