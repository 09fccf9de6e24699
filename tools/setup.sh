#!/bin/bash
# Set-up for a Debian 12 machine: the Debian packages guestbench drives (as root, only what is missing),
# then a venv from /usr/bin/python3 with system site packages (the libguestfs and libvirt bindings are
# Debian-only) and guestbench with its PyPI dependencies. Idempotent and quick when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(python3-guestfs libguestfs-tools qemu-system-x86 qemu-utils supermin user-mode-linux python3-yaml
      libvirt-daemon-system python3-libvirt python3-venv python3-pip fio bonnie++ dbench nbdkit libnbd-bin
      jfsutils chromium openssl mmdebstrap bubblewrap)
# chromium: the report test renders index.html headless, as a reader's browser would; openssl: the TLS
# certificate of the fleet test's cluster
VENV=.venv
STAMP="$VENV/.guestbench-installed"

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) != 0 ]]; then
        echo "guestbench set-up: missing Debian packages: ${missing[*]}; run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "guestbench set-up: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null
    apt-get install -y -q "${missing[@]}" </dev/null
fi

if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import guestfs' 2>/dev/null; then
    rm -rf "$VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if [[ ! -f $STAMP || setup.cfg -nt $STAMP || pyproject.toml -nt $STAMP ]]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test,fleet]' </dev/null
    touch "$STAMP"
fi
