#!/bin/sh
# A hypervisor that answers libguestfs's probes, then at the launch writes where it was told to keep temporary
# files and libguestfs its cache (to $GUESTBENCH_TEST_HV_ENV) and dies.
for a in "$@"; do
  if [ "$a" = "-kernel" ]; then
    printf 'TMPDIR=%s\nLIBGUESTFS_CACHEDIR=%s\n' "$TMPDIR" "$LIBGUESTFS_CACHEDIR" > "$GUESTBENCH_TEST_HV_ENV"
    echo "env.sh: told where its temporary files go" >&2; exit 3
  fi
done
exec qemu-system-x86_64 "$@"
