"""The network lab beneath ``local_cluster(network=True)``: a bridge and a network namespace per
worker node, each with its own link and address, so that network faults cut, thin or slow
real links. A workload reads the lab of its cluster (:func:`lab_of`), runs a lab command in a
node's namespace (:func:`run`), reads a node's link back typed (:func:`read_link`: the loss
its fault tables drop, its token buckets, its retransmissions) and ends what runs in a node's
namespace (:func:`kill_node_processes`)."""

from chaos.net._faults import LinkState, read_link
from chaos.net._lab import COMMAND_TIMEOUT, NetLab, NetNode, kill_node_processes, lab_of, run

__all__ = ["COMMAND_TIMEOUT", "LinkState", "NetLab", "NetNode", "kill_node_processes", "lab_of", "read_link", "run"]
