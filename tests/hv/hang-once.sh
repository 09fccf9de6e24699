#!/bin/sh
# A hypervisor whose first launch hangs and whose next one boots: the stall that KVM on an emulated CPU shows
# now and then. The mark file ($GUESTBENCH_TEST_HANG_MARK) records that the first launch happened.
for a in "$@"; do
  if [ "$a" = "-kernel" ] && [ ! -e "$GUESTBENCH_TEST_HANG_MARK" ]; then
    : > "$GUESTBENCH_TEST_HANG_MARK"
    exec sleep 100000
  fi
done
exec qemu-system-x86_64 "$@"
