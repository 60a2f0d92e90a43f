# virt-cpu-policy %postun: on erase ($1 = 0), the package's own directories, when empty (the
# package lists no directory: rpm leaves them otherwise). An edited policy stays as
# /etc/virt-cpu-policy/policy.toml.rpmsave, and with it that directory. In
# /var/lib/virt-cpu-policy, the hook's state files go (its decision counts and the cluster CPU
# it saw, each with its lock: figures, no data); the daemon's backups of replaced definitions
# and its snapshot stay, and with them the directory.
if [ "$1" = 0 ]; then
    for f in hook-decisions hook-decisions.lock cluster-cpu cluster-cpu.lock; do
        rm -f "/var/lib/virt-cpu-policy/$f"
    done
    rmdir /var/lib/virt-cpu-policy 2>/dev/null || :
    for d in /usr/share/virt-cpu-policy/libvirt/qemu.d /usr/share/virt-cpu-policy/libvirt \
        /usr/share/virt-cpu-policy/cloudstack /usr/share/virt-cpu-policy/vdsm/before_vm_start \
        /usr/share/virt-cpu-policy/vdsm /usr/share/virt-cpu-policy \
        /usr/share/doc/virt-cpu-policy/docs /usr/share/doc/virt-cpu-policy \
        /usr/libexec/virt-cpu-policy /etc/virt-cpu-policy; do
        rmdir "$d" 2>/dev/null || :
    done
fi
exit 0
