# virt-cpu-policy %postun: on erase ($1 = 0), the package's own directories, when empty (the
# package lists no directory: rpm leaves them otherwise). An edited policy stays as
# /etc/virt-cpu-policy/policy.toml.rpmsave, and with it that directory.
if [ "$1" = 0 ]; then
    for d in /usr/share/virt-cpu-policy/libvirt/qemu.d /usr/share/virt-cpu-policy/libvirt \
        /usr/share/virt-cpu-policy/cloudstack /usr/share/virt-cpu-policy/vdsm/before_vm_start \
        /usr/share/virt-cpu-policy/vdsm /usr/share/virt-cpu-policy \
        /usr/share/doc/virt-cpu-policy/docs /usr/share/doc/virt-cpu-policy \
        /usr/libexec/virt-cpu-policy /etc/virt-cpu-policy; do
        rmdir "$d" 2>/dev/null || :
    done
fi
exit 0
