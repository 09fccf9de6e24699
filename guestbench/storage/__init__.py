"""Disk storage for guests: backings on the host (host.py) and stacks built inside the appliance (guest.py)."""
