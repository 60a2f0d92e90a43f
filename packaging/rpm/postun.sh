# virt-cpu-policy %postun: on erase ($1 = 0) rpm has removed the qemu hook (a modified one is kept
# as .rpmsave, which libvirt would still run while executable: drop its x bit); make a running
# libvirt daemon notice. On upgrade ($1 = 1) %post already did.
if [ "$1" = 0 ]; then
    if [ -e /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy.rpmsave ]; then
        chmod a-x /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy.rpmsave || :
    fi
    for daemon in libvirtd virtqemud; do
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
            if systemctl is-active --quiet "$daemon.service" 2>/dev/null; then
                systemctl reload "$daemon.service" >/dev/null 2>&1 || :
            fi
        elif command -v pkill >/dev/null 2>&1; then
            pkill -HUP -x "$daemon" >/dev/null 2>&1 || :
        fi
    done
fi
exit 0
