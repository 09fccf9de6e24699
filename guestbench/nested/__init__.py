"""Nested placement: guestbench run inside a level-1 guest that it builds and starts through libvirt."""
