"""Software stacks: a Debian suite's libguestfs, qemu, libvirt, UML and Python in a root file system of their own,
beside the machine's ("host"), so that one scenario can compare them (docs/stacks.md). sources.py derives a suite's
apt sources from the machine's; store.py is where stacks live and what each holds; build.py makes one."""
