# virt-cpu-policy %preun: on erase ($1 = 0), stop virt-cpu-policyd when systemd runs it.
if [ "$1" = 0 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl stop virt-cpu-policyd.service >/dev/null 2>&1 || :
fi
exit 0
