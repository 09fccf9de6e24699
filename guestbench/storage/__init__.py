"""Disk storage for guests: backings on the host (host.py, one kind per module in host_kinds/) and stacks
built inside the appliance (guest.py, one layout per class in layouts/)."""
