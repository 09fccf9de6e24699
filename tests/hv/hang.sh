#!/bin/sh
# A hypervisor that answers libguestfs's probes (by passing them to qemu) but never boots:
# the launch invocation (it has -kernel) sleeps forever, like a guest hung in early boot.
for a in "$@"; do
  if [ "$a" = "-kernel" ]; then exec sleep 100000; fi
done
exec qemu-system-x86_64 "$@"
