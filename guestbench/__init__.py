"""guestbench: measure libguestfs appliances on every hypervisor backend a machine offers."""

__version__ = "0.1.0"
