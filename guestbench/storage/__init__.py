"""Disk storage for guests: backings on the host (backing.py, one kind per module in backing_kinds/) and stacks
built inside the appliance (guest.py, one layout per class in layouts/)."""
