#!/bin/sh
# A hypervisor whose first launch goes wrong and whose next one boots: what KVM on an emulated CPU shows now
# and then. $GUESTBENCH_TEST_FIRST_LAUNCH says how: "hang" (never boots) or "fail" (exits at once, as qemu does
# when KVM refuses it). The mark file ($GUESTBENCH_TEST_HANG_MARK) records that the first launch happened.
for a in "$@"; do
  if [ "$a" = "-kernel" ] && [ ! -e "$GUESTBENCH_TEST_HANG_MARK" ]; then
    : > "$GUESTBENCH_TEST_HANG_MARK"
    if [ "$GUESTBENCH_TEST_FIRST_LAUNCH" = "fail" ]; then
      echo "qemu-system-x86_64: error: kvm run failed Input/output error (test: first launch)" >&2
      exit 1
    fi
    echo "qemu-system-x86_64: stalled before the kernel (test: first launch)" >&2
    exec sleep 100000
  fi
done
exec qemu-system-x86_64 "$@"
