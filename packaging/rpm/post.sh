# virt-cpu-policy %post: make a running libvirt daemon notice the qemu hook
# /etc/libvirt/hooks/qemu.d/50-virt-cpu-policy (SIGHUP via the units' reload; nothing restarts).
for daemon in libvirtd virtqemud; do
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet "$daemon.service" 2>/dev/null; then
            systemctl reload "$daemon.service" >/dev/null 2>&1 || :
        fi
    elif command -v pkill >/dev/null 2>&1; then
        pkill -HUP -x "$daemon" >/dev/null 2>&1 || :
    fi
done
# virt-cpu-policyd is not enabled by the package; an upgrade restarts it if it runs.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    systemctl try-restart virt-cpu-policyd.service >/dev/null 2>&1 || :
fi
exit 0
