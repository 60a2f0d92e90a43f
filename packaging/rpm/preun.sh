# virt-cpu-policy %preun: on erase ($1 = 0), stop virt-cpu-policyd when systemd runs it and take the
# libvirt hook away while the binaries are still there (libvirt reloaded).
if [ "$1" = 0 ]; then
    /usr/libexec/virt-cpu-policy/package-scripts deconfigure || :
fi
exit 0
