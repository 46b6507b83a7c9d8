#!/usr/bin/env bash
# Runs sandbox tests on cgroup v2 from a host that has cgroup v1 (this project's development
# machine): a QEMU guest (TCG, no KVM needed) boots Debian's stock kernel with cgroup v1 switched
# off, mounts this host's / read-only over 9p as its root, puts fresh tmpfs on /tmp and /run and
# cgroup2 on /sys/fs/cgroup, and runs pytest from this checkout's .venv (run scripts/setup.sh
# first). Under emulation everything is ~10-20x slower, so tests that time a busy workload (a
# thousand figures in 60 s) can fail for speed alone; read each failure before blaming cgroup v2.
#   scripts/test-in-cgroup-v2-vm.sh tests/sandbox/test_contract.py [pytest arguments...]
# Needs root (9p passthrough, apt-get for qemu-system-x86 and busybox-static, and `apt-get
# download` for the kernel package, which is unpacked, never installed). The kernel, initramfs
# and guest output live in .cache/cgroup-v2-vm/; the guest's pytest log is copied to
# .cache/cgroup-v2-vm/out/pytest.log. VM_TIMEOUT (seconds, default 3600) bounds the whole run;
# VM_MEM (default 6G) is the guest's memory; VM_CGROUP=/some/group runs the tests from that
# (non-root) cgroup, as under systemd, instead of the root cgroup.
set -euo pipefail
VM_CGROUP=${VM_CGROUP:-}
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 TEST_PATH... [pytest arguments]" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "no .venv: run scripts/setup.sh first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (9p passthrough and apt-get need it)" >&2; exit 2; }
work=$PWD/.cache/cgroup-v2-vm
mkdir -p "$work/out"
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v busybox >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 busybox-static >/dev/null
fi
# an initrd from before the guest switched roots (switch_root) is built again
if [ ! -f "$work/initrd.gz" ] || ! grep -q switch_root "$work/initrd/init" 2>/dev/null; then
  # the kernel package linux-image-amd64 points at, unpacked (not installed)
  package=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
  rm -rf "$work/kernel" "$work/initrd" && mkdir -p "$work/kernel" "$work/initrd"/{bin,mod,proc,sys,dev,newroot}
  (cd "$work/kernel" && apt-get download "$package" >/dev/null 2>&1 && dpkg-deb -x ./*.deb root && rm ./*.deb)
  cp "$(command -v busybox)" "$work/initrd/bin/busybox"
  modules=$(echo "$work"/kernel/root/lib/modules/*/kernel)
  order="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev
    drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache
    net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p"
  for module in $order; do cp "$modules/$module.ko" "$work/initrd/mod/"; done
  cat > "$work/initrd/init" <<EOF
#!/bin/busybox sh
bb=/bin/busybox
\$bb mount -t proc proc /proc && \$bb mount -t sysfs sys /sys && \$bb mount -t devtmpfs dev /dev
for module in $(for m in $order; do basename "$m"; done | tr '\n' ' '); do \$bb insmod /mod/\$module.ko; done
if \$bb mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=loose,ro hostroot /newroot; then
  for fs in proc:proc sysfs:sys devtmpfs:dev tmpfs:tmp tmpfs:run cgroup2:sys/fs/cgroup; do
    \$bb mount -t \${fs%%:*} \${fs%%:*} /newroot/\${fs#*:}
  done
  \$bb mkdir -p /newroot/tmp/out
  \$bb mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 out /newroot/tmp/out
  echo "guest: kernel \$(\$bb uname -r), cgroup2 controllers: \$(\$bb cat /newroot/sys/fs/cgroup/cgroup.controllers)"
  # switch_root, not chroot: in a chroot the kernel refuses user namespaces (unshare(2), EPERM),
  # which an ordinary user's controller needs
  exec \$bb switch_root /newroot /bin/bash -c "/bin/bash /tmp/out/guest.sh; sync; $(command -v busybox) poweroff -f"
fi
\$bb sync
\$bb poweroff -f
EOF
  chmod +x "$work/initrd/init"
  (cd "$work/initrd" && find . | busybox cpio -o -H newc 2>/dev/null | gzip > "$work/initrd.gz")
fi
printf '%q ' "$@" > "$work/out/arguments"
cat > "$work/out/guest.sh" <<EOF
cd $(printf '%q' "$PWD")
export PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
eval "set -- \$(cat /tmp/out/arguments)"
move=true
# in the guest alone: ordinary users may create user namespaces, as most distributions ship
[ -w /proc/sys/kernel/unprivileged_userns_clone ] && echo 1 > /proc/sys/kernel/unprivileged_userns_clone
if [ -n "${VM_CGROUP:-}" ]; then  # pytest alone in a group of its own, as under systemd-run --scope -p Delegate=yes
  echo "+cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control  # as systemd leaves the root
  mkdir -p /sys/fs/cgroup/${VM_CGROUP#/}
  move='echo \$\$ > /sys/fs/cgroup/${VM_CGROUP#/}/cgroup.procs'
fi
unshare --pid --fork --mount-proc bash -c "\$move && exec .venv/bin/python -m pytest -q -m '' -p no:cacheprovider -rfE \"\\\$@\"" pytest "\$@" > /tmp/out/pytest.log 2>&1
echo \$? > /tmp/out/status
tail -n 30 /tmp/out/pytest.log
EOF
rm -f "$work/out/pytest.log" "$work/out/status"
timeout -k 5 "${VM_TIMEOUT:-3600}" qemu-system-x86_64 -machine q35 -cpu max -smp "$(nproc)" -m "${VM_MEM:-6G}" \
  -nographic -no-reboot -kernel "$(echo "$work"/kernel/root/boot/vmlinuz-*)" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 cgroup_no_v1=all" \
  -fsdev "local,id=root,path=/,security_model=passthrough,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
  -fsdev "local,id=out,path=$work/out,security_model=passthrough" -device virtio-9p-pci,fsdev=out,mount_tag=out \
  | tr -d '\r' | sed -n 's/^.*guest: /guest: /; /^guest: /,$p'
[ "$(cat "$work/out/status" 2>/dev/null)" = 0 ]
