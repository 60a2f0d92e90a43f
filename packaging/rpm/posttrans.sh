# virt-cpu-policy %posttrans: the libvirt qemu hook becomes active at the end of the transaction
# (/usr/libexec/virt-cpu-policy/package-scripts configure: /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy
# from the package's copy, libvirt reloaded through systemd or its own pid file, a running
# virt-cpu-policyd restarted), after an upgrade has erased what the old version owned.
HOOK=/etc/libvirt/hooks/qemu.d/50-virt-cpu-policy
OFF=/var/lib/virt-cpu-policy/qemu-hook.off
# An edited hook of 0.1.0-1 (%config) is saved as .rpmsave, which libvirt would run while executable.
if [ -f "$HOOK.rpmsave" ]; then
    chmod a-x "$HOOK.rpmsave" || :
fi
if [ -e "$OFF" ]; then
    /usr/libexec/virt-cpu-policy/package-scripts configure --hook-off
    rm -f "$OFF"
else
    /usr/libexec/virt-cpu-policy/package-scripts configure
fi
exit 0
