# virt-cpu-policy %pre. A hook switched off (chmod -x /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy)
# stays off across an upgrade: remembered here, because an upgrade from 0.1.0-1, which shipped the
# hook as %config(noreplace), erases that file before %posttrans installs the new one.
if [ "$1" -gt 1 ] && [ -f /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy ] &&
    [ ! -x /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy ]; then
    mkdir -p /var/lib/virt-cpu-policy && : >/var/lib/virt-cpu-policy/qemu-hook.off
fi
exit 0
