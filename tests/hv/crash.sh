#!/bin/sh
# A hypervisor that answers libguestfs's probes but dies at once on launch, with a message.
for a in "$@"; do
  if [ "$a" = "-kernel" ]; then echo "crash.sh: simulated hypervisor crash at start-up" >&2; exit 3; fi
done
exec qemu-system-x86_64 "$@"
