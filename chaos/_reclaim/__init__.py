"""What every teardown of raychaos shares: the owner label on what it makes on the machine, the
reaper that outlives its driver, and ``raychaos cleanup`` (its public face: ``chaos.cluster.cleanup_machine``)."""
