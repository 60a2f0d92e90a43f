#!/usr/bin/python3
"""Domain XML made by virt-install (Debian's `virtinst`) with --print-xml (issue 19's corpus).

    tests/producers/virt_install.py URI OUTDIR [SLUG...]

For every option set below (or those the SLUGs name), runs `virt-install --connect URI
--print-xml ...` and writes the document it prints to OUTDIR/<slug>.xml; an option set
virt-install refuses is listed on stderr with its message (and not written). virt-install asks the connected libvirt for its capabilities
and domcapabilities (machine types, CPU modes, emulator, defaults), so each generation gets its
own documents: run it once per libvirt (tests/producers/regenerate does).

Every set shares BASE: a fixed name and uuid (so identical documents of different sets dedupe),
256 MiB, `--import --disk none`, no console attached. Sets that keep virt-install's defaults for
the network and graphics fix the MAC address, which virt-install otherwise draws at random.
`@Q35@`, `@PC@` and `@Q35_255@` stand for this libvirt's newest versioned q35 and i440fx machine
types and its newest q35 limited to 255 vCPUs (pc-q35-2.7), read from `virsh capabilities`.

The sets of SETS_NEWER_OSINFO name OS ids that Debian 12's osinfo-db (0.20221130) lacks (RHEL 10
and its rebuilds, issue 31's floors): virt-install runs them with libosinfo pointed at the newer
database in $VCP_OSINFO_DB (OSINFO_SYSTEM_DIR, which replaces /usr/share/osinfo for libosinfo;
tests/producers/regenerate fetches it, pinned); without it they are skipped, saying so. The
other sets keep Debian 12's database, so that their documents do not change with it.

Standard library only: runs with Debian's python3 beside virtinst.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BASE = [
    "--print-xml", "--name", "guest", "--uuid", "0b6c3f4e-2d1a-4c5b-9e8f-7a6b5c4d3e2f",
    "--memory", "256", "--import", "--disk", "none", "--noautoconsole",
]
# No network, no graphics: what most sets use (a diskless guest that starts anywhere).
BARE = ["--network", "none", "--graphics", "none"]
MAC = "52:54:00:6b:00:01"
DEFAULT_NET = ["--network", f"network=default,mac={MAC}"]
NO_ACPI = ["--features", "acpi=off"]

# (slug, arguments). Sets ending in -tcg use --virt-type qemu; the others virt-install's
# default for the host (kvm where /dev/kvm is usable).
SETS_X86 = [
    # --- OS variants: virt-install's defaults per OS (machine type, CPU mode, devices)
    ("linux2022-defaults", ["--osinfo", "linux2022", *DEFAULT_NET]),
    ("debian11", ["--osinfo", "debian11", *BARE]),
    ("ubuntu22.04", ["--osinfo", "ubuntu22.04", *BARE]),
    ("rhel9.0", ["--osinfo", "rhel9.0", *BARE]),
    ("rhel8.0", ["--osinfo", "rhel8.0", *BARE]),
    # RHEL 9 under TCG: no <cpu>, so QEMU's qemu64, below the OS's floor (x86-64-v2) until a
    # rewrite raises it (tests/integration/producer_floors.rs starts it).
    ("rhel9.0-tcg", ["--osinfo", "rhel9.0", "--virt-type", "qemu", *BARE]),
    ("centos-stream9", ["--osinfo", "centos-stream9", *BARE]),
    ("fedora37", ["--osinfo", "fedora37", *BARE]),
    ("opensuse15.4", ["--osinfo", "opensuse15.4", *BARE]),
    ("freebsd13.1", ["--osinfo", "freebsd13.1", *BARE]),
    ("generic", ["--osinfo", "generic", *BARE]),
    ("win10", ["--osinfo", "win10", *DEFAULT_NET]),
    ("win2k22", ["--osinfo", "win2k22", *BARE]),
    ("debian11-tcg", ["--osinfo", "debian11", "--virt-type", "qemu", *BARE]),
    ("win10-tcg", ["--osinfo", "win10", "--virt-type", "qemu", *BARE]),
    ("generic-tcg", ["--osinfo", "generic", "--virt-type", "qemu", *BARE]),
    # --- machine types
    ("machine-pc", ["--osinfo", "linux2022", "--machine", "pc", *BARE]),
    ("machine-pc-tcg", ["--osinfo", "linux2022", "--machine", "pc", "--virt-type", "qemu", *BARE]),
    ("machine-q35-tcg", ["--osinfo", "linux2022", "--machine", "q35", "--virt-type", "qemu", *BARE]),
    ("machine-q35-versioned", ["--osinfo", "linux2022", "--machine", "@Q35@", *BARE]),
    ("machine-q35-versioned-tcg",
     ["--osinfo", "linux2022", "--machine", "@Q35@", "--virt-type", "qemu", *BARE]),
    ("machine-pc-versioned-tcg",
     ["--osinfo", "linux2022", "--machine", "@PC@", "--virt-type", "qemu", *BARE]),
    ("machine-q35-2.7-tcg",
     ["--osinfo", "linux2022", "--machine", "@Q35_255@", "--virt-type", "qemu", *BARE]),
    # --- --cpu: modes, named models, features, check
    ("cpu-host-model", ["--osinfo", "linux2022", "--cpu", "host-model", *BARE]),
    ("cpu-host-model-tcg",
     ["--osinfo", "linux2022", "--cpu", "host-model", "--virt-type", "qemu", *BARE]),
    ("cpu-host-passthrough-migratable",
     ["--osinfo", "linux2022", "--cpu", "host-passthrough,migratable=on", *BARE]),
    ("cpu-host-passthrough-tcg",
     ["--osinfo", "linux2022", "--cpu", "host-passthrough", "--virt-type", "qemu", *BARE]),
    ("cpu-maximum-tcg", ["--osinfo", "linux2022", "--cpu", "maximum", "--virt-type", "qemu", *BARE]),
    ("cpu-host-model-only", ["--osinfo", "linux2022", "--cpu", "host-model-only", *BARE]),
    ("cpu-host-model-only-tcg",
     ["--osinfo", "linux2022", "--cpu", "host-model-only", "--virt-type", "qemu", *BARE]),
    ("cpu-host-copy", ["--osinfo", "linux2022", "--cpu", "host-copy", *BARE]),
    ("cpu-qemu64-tcg", ["--osinfo", "linux2022", "--cpu", "qemu64", "--virt-type", "qemu", *BARE]),
    ("cpu-kvm64", ["--osinfo", "linux2022", "--cpu", "kvm64", *BARE]),
    ("cpu-nehalem-tcg", ["--osinfo", "linux2022", "--cpu", "Nehalem", "--virt-type", "qemu", *BARE]),
    ("cpu-nehalem-check-full-tcg",
     ["--osinfo", "linux2022", "--cpu", "Nehalem,match=exact,check=full", "--virt-type", "qemu",
      *BARE]),
    ("cpu-haswell-notsx", ["--osinfo", "linux2022", "--cpu", "Haswell-noTSX", *BARE]),
    ("cpu-haswell-notsx-tcg",
     ["--osinfo", "linux2022", "--cpu", "Haswell-noTSX", "--virt-type", "qemu", *BARE]),
    ("cpu-skylake-features-tcg",
     ["--osinfo", "linux2022", "--cpu", "Skylake-Client-IBRS,+x2apic,-hle",
      "--virt-type", "qemu", *BARE]),
    ("cpu-epyc-tcg", ["--osinfo", "linux2022", "--cpu", "EPYC", "--virt-type", "qemu", *BARE]),
    ("cpu-cascadelake-check-none",
     ["--osinfo", "linux2022", "--cpu", "Cascadelake-Server,check=none", *BARE]),
    ("cpu-westmere-require-disable-tcg",
     ["--osinfo", "linux2022", "--cpu", "Westmere,require=popcnt,disable=aes,forbid=vmx",
      "--virt-type", "qemu", *BARE]),
    ("cpu-penryn-fallback-forbid-tcg",
     ["--osinfo", "linux2022", "--cpu", "model=Penryn,model.fallback=forbid",
      "--virt-type", "qemu", *BARE]),
    ("cpu-host-model-check-full-tcg",
     ["--osinfo", "linux2022", "--cpu", "host-model,check=full", "--virt-type", "qemu", *BARE]),
    ("cpu-none-tcg", ["--osinfo", "generic", "--cpu", "none", "--virt-type", "qemu", *BARE]),
    # --- --vcpus: maxvcpus, sockets/dies/cores/threads, large counts, cpuset, <vcpus>
    ("vcpus-4-tcg", ["--osinfo", "linux2022", "--vcpus", "4", "--virt-type", "qemu", *BARE]),
    ("vcpus-4-max-8-tcg",
     ["--osinfo", "linux2022", "--vcpus", "4,maxvcpus=8", "--virt-type", "qemu", *BARE]),
    ("vcpus-topology-2x2x2-tcg",
     ["--osinfo", "linux2022", "--vcpus", "8,sockets=2,cores=2,threads=2", "--virt-type", "qemu",
      *BARE]),
    ("vcpus-topology-only-tcg",
     ["--osinfo", "linux2022", "--vcpus", "sockets=1,cores=4,threads=2", "--virt-type", "qemu",
      *BARE]),
    ("vcpus-hotplug-topology-tcg",
     ["--osinfo", "linux2022", "--vcpus", "2,maxvcpus=16,sockets=2,cores=4,threads=2",
      "--virt-type", "qemu", *BARE]),
    ("vcpus-dies-tcg",
     ["--osinfo", "linux2022", "--vcpus", "8,sockets=1,dies=2,cores=2,threads=2",
      "--virt-type", "qemu", *BARE]),
    ("vcpus-topology-kvm", ["--osinfo", "linux2022", "--vcpus", "4,sockets=1,cores=4,threads=1",
                            *BARE]),
    ("vcpus-cpuset-tcg",
     ["--osinfo", "linux2022", "--vcpus", "2,cpuset=0-1", "--virt-type", "qemu", *BARE]),
    ("vcpus-list-tcg",
     ["--osinfo", "linux2022", "--vcpus",
      "2,maxvcpus=4,vcpus.vcpu0.id=0,vcpus.vcpu0.enabled=yes,vcpus.vcpu0.hotpluggable=no,"
      "vcpus.vcpu1.id=1,vcpus.vcpu1.enabled=yes,vcpus.vcpu1.hotpluggable=yes,"
      "vcpus.vcpu2.id=2,vcpus.vcpu2.enabled=no,vcpus.vcpu2.hotpluggable=yes,"
      "vcpus.vcpu3.id=3,vcpus.vcpu3.enabled=no,vcpus.vcpu3.hotpluggable=yes",
      "--virt-type", "qemu", *BARE]),
    ("vcpus-240-pc-tcg",
     ["--osinfo", "linux2022", "--machine", "pc", "--vcpus", "240", "--virt-type", "qemu", *BARE]),
    ("vcpus-255-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "255", "--virt-type", "qemu", *BARE]),
    ("vcpus-256-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "256", "--virt-type", "qemu", *BARE]),
    ("vcpus-288-q35", ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "288", *BARE]),
    ("vcpus-300-q35", ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "300", *BARE]),
    ("vcpus-288-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "288", "--virt-type", "qemu", *BARE]),
    ("vcpus-4-max-288-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "4,maxvcpus=288",
      "--virt-type", "qemu", *BARE]),
    ("vcpus-288-q35-x2apic-iommu-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "288", "--cpu", "qemu64,+x2apic",
      "--iommu", "model=intel,driver.intremap=on,driver.eim=on",
      "--features", "ioapic.driver=qemu", "--virt-type", "qemu", *BARE]),
    ("vcpus-16-max-384-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "16,maxvcpus=384",
      "--virt-type", "qemu", *BARE]),
    ("vcpus-64-max-288-pc",
     ["--osinfo", "linux2022", "--machine", "pc", "--vcpus", "64,maxvcpus=288", *BARE]),
    ("vcpus-8-max-64-topology-versioned-tcg",
     ["--osinfo", "linux2022", "--machine", "@Q35@", "--vcpus",
      "8,maxvcpus=64,sockets=4,cores=8,threads=2", "--virt-type", "qemu", *BARE]),
    # --- NUMA: guest cells (--cpu numa.*) and --numatune
    ("numa-2-cells-tcg",
     ["--osinfo", "linux2022", "--vcpus", "4",
      "--cpu", "numa.cell0.cpus=0-1,numa.cell0.memory=131072,"
      "numa.cell1.cpus=2-3,numa.cell1.memory=131072",
      "--virt-type", "qemu", *BARE]),
    ("numa-host-model-2-cells",
     ["--osinfo", "linux2022", "--vcpus", "4",
      "--cpu", "host-model,numa.cell0.cpus=0-1,numa.cell0.memory=131072,"
      "numa.cell1.cpus=2-3,numa.cell1.memory=131072", *BARE]),
    ("numa-cells-partial-hotplug-tcg",
     ["--osinfo", "linux2022", "--vcpus", "2,maxvcpus=8",
      "--cpu", "numa.cell0.cpus=0-3,numa.cell0.memory=131072,"
      "numa.cell1.cpus=4-7,numa.cell1.memory=131072",
      "--virt-type", "qemu", *BARE]),
    ("numatune-strict-tcg",
     ["--osinfo", "linux2022", "--numatune", "0,mode=strict", "--virt-type", "qemu", *BARE]),
    ("numatune-preferred",
     ["--osinfo", "linux2022", "--numatune", "memory.mode=preferred,memory.nodeset=0", *BARE]),
    ("memory-hotplug-tcg",
     ["--osinfo", "linux2022", "--memory", "256,maxmemory=1024,maxMemory.slots=4",
      "--virt-type", "qemu", *BARE]),
    ("memory-hotplug-numa-tcg",
     ["--osinfo", "linux2022", "--memory", "256,maxmemory=1024,maxMemory.slots=4", "--vcpus", "2",
      "--cpu", "numa.cell0.cpus=0-1,numa.cell0.memory=262144", "--virt-type", "qemu", *BARE]),
    # --- --iommu and --features (ioapic, apic, pmu, kvm hidden, smm)
    ("iommu-intel-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--iommu", "model=intel",
      "--features", "ioapic.driver=qemu", "--virt-type", "qemu", *BARE]),
    ("iommu-intel-driver-tcg",
     ["--osinfo", "linux2022", "--machine", "q35",
      "--iommu", "model=intel,driver.intremap=on,driver.eim=on,driver.caching_mode=on",
      "--features", "ioapic.driver=qemu", "--virt-type", "qemu", *BARE]),
    ("iommu-intel-no-ioapic-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--iommu", "model=intel,driver.intremap=on",
      "--virt-type", "qemu", *BARE]),
    ("iommu-virtio-q35-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--iommu", "model=virtio",
      "--virt-type", "qemu", *BARE]),
    ("iommu-intel-pc-tcg",
     ["--osinfo", "linux2022", "--machine", "pc", "--iommu", "model=intel",
      "--virt-type", "qemu", *BARE]),
    ("iommu-intel-300-vcpus",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "300",
      "--iommu", "model=intel,driver.intremap=on,driver.eim=on",
      "--features", "ioapic.driver=qemu", *BARE]),
    ("iommu-intel-eim-off-256-tcg",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "256",
      "--iommu", "model=intel,driver.intremap=on,driver.eim=off",
      "--features", "ioapic.driver=qemu", "--virt-type", "qemu", *BARE]),
    ("features-ioapic-qemu-tcg",
     ["--osinfo", "linux2022", "--features", "ioapic.driver=qemu", "--virt-type", "qemu", *BARE]),
    ("features-ioapic-kvm-300",
     ["--osinfo", "linux2022", "--machine", "q35", "--vcpus", "300",
      "--features", "ioapic.driver=kvm", *BARE]),
    ("features-kvm-hidden-pmu-off",
     ["--osinfo", "linux2022", "--features", "kvm.hidden.state=on,pmu.state=off", *BARE]),
    ("features-smm-apic-tcg",
     ["--osinfo", "linux2022", "--features", "smm.state=on,apic=on", "--virt-type", "qemu",
      *BARE]),
]

# RHEL 10 and its rebuilds (floor x86-64-v3), each as virt-install makes it for KVM (its
# default, host-passthrough) and under TCG (no <cpu>: QEMU's qemu64), with the osinfo-db of
# $VCP_OSINFO_DB. osinfo-db 0.20250606 (the pinned one) has rhel10.0, centos-stream10 and
# almalinux10 but not yet rocky10 nor ol10: virt-install refuses those two as unknown OS names
# (listed on stderr) until the pin moves to a database that has them.
SETS_NEWER_OSINFO = [
    ("rhel10.0", ["--osinfo", "rhel10.0", *BARE]),
    ("rhel10.0-tcg", ["--osinfo", "rhel10.0", "--virt-type", "qemu", *BARE]),
    ("centos-stream10", ["--osinfo", "centos-stream10", *BARE]),
    ("centos-stream10-tcg", ["--osinfo", "centos-stream10", "--virt-type", "qemu", *BARE]),
    ("almalinux10", ["--osinfo", "almalinux10", *BARE]),
    ("almalinux10-tcg", ["--osinfo", "almalinux10", "--virt-type", "qemu", *BARE]),
    ("rocky10", ["--osinfo", "rocky10", *BARE]),
    ("rocky10-tcg", ["--osinfo", "rocky10", "--virt-type", "qemu", *BARE]),
    ("ol10", ["--osinfo", "ol10", *BARE]),
    ("ol10-tcg", ["--osinfo", "ol10", "--virt-type", "qemu", *BARE]),
]

SETS_AARCH64 = [
    # virt-install's default: ACPI, which libvirt refuses on aarch64 without UEFI firmware (none is
    # installed on the rig); the other sets turn ACPI off so that libvirt defines them.
    ("aarch64-virt-tcg", ["--arch", "aarch64", "--osinfo", "linux2022", "--virt-type", "qemu",
                          *BARE]),
    ("aarch64-no-acpi-tcg", ["--arch", "aarch64", "--osinfo", "linux2022", "--virt-type", "qemu",
                             *NO_ACPI, *BARE]),
    ("aarch64-cpu-max-tcg", ["--arch", "aarch64", "--osinfo", "linux2022", "--virt-type", "qemu",
                             "--cpu", "maximum", *NO_ACPI, *BARE]),
    ("aarch64-cortex-a72-tcg", ["--arch", "aarch64", "--osinfo", "linux2022",
                                "--virt-type", "qemu", "--cpu", "cortex-a72", *NO_ACPI, *BARE]),
    ("aarch64-host-model-tcg", ["--arch", "aarch64", "--osinfo", "linux2022",
                                "--virt-type", "qemu", "--cpu", "host-model", *NO_ACPI, *BARE]),
    ("aarch64-host-passthrough-tcg", ["--arch", "aarch64", "--osinfo", "linux2022",
                                      "--virt-type", "qemu", "--cpu", "host-passthrough",
                                      *NO_ACPI, *BARE]),
    ("aarch64-vcpus-8-topology-tcg", ["--arch", "aarch64", "--osinfo", "linux2022",
                                      "--virt-type", "qemu",
                                      "--vcpus", "8,sockets=2,cores=2,threads=2", *NO_ACPI, *BARE]),
    ("aarch64-vcpus-300-tcg", ["--arch", "aarch64", "--osinfo", "linux2022",
                               "--virt-type", "qemu", "--vcpus", "300", *NO_ACPI, *BARE]),
    ("aarch64-smmuv3-tcg", ["--arch", "aarch64", "--osinfo", "linux2022", "--virt-type", "qemu",
                            "--iommu", "model=smmuv3", *NO_ACPI, *BARE]),
]


def machines(uri):
    """The x86_64 machine types of the libvirt at `uri`: name -> maxCpus."""
    caps = subprocess.run(["virsh", "-c", uri, "capabilities"], check=True,
                          capture_output=True, text=True).stdout
    out = {}
    for guest in ET.fromstring(caps).iter("guest"):
        arch = guest.find("arch")
        if arch is None or arch.get("name") != "x86_64":
            continue
        for m in arch.iter("machine"):
            out[m.text.strip()] = int(m.get("maxCpus", "0"))
    return out


def newest(names, family):
    """The newest versioned machine type of `family` (`pc-q35`, `pc-i440fx`)."""
    pat = re.compile(re.escape(family) + r"-(\d+)\.(\d+)$")
    found = [(tuple(map(int, m.groups())), n) for n in names if (m := pat.match(n))]
    return max(found)[1] if found else None


def has_arch(uri, arch):
    caps = subprocess.run(["virsh", "-c", uri, "capabilities"], check=True,
                          capture_output=True, text=True).stdout
    return any(a.get("name") == arch for a in ET.fromstring(caps).iter("arch"))


def main():
    if len(sys.argv) < 3:
        print("usage: virt_install.py URI OUTDIR [SLUG...]", file=sys.stderr)
        return 2
    uri, out, only = sys.argv[1], Path(sys.argv[2]), set(sys.argv[3:])
    out.mkdir(parents=True, exist_ok=True)
    ms = machines(uri)
    subst = {"@Q35@": newest(ms, "pc-q35"), "@PC@": newest(ms, "pc-i440fx"),
             "@Q35_255@": "pc-q35-2.7" if "pc-q35-2.7" in ms else None}
    newer = os.environ.get("VCP_OSINFO_DB", "")
    if newer and not (Path(newer) / "os").is_dir():
        print(f"virt_install.py: VCP_OSINFO_DB={newer} holds no osinfo-db (no os/)",
              file=sys.stderr)
        return 1
    # (slug, arguments, environment): the newer sets with libosinfo reading only that database.
    sets = [(slug, args, None) for slug, args in SETS_X86]
    if has_arch(uri, "aarch64"):
        sets += [(slug, args, None) for slug, args in SETS_AARCH64]
    sets += [(slug, args, {**os.environ, "OSINFO_SYSTEM_DIR": newer} if newer else False)
             for slug, args in SETS_NEWER_OSINFO]
    unknown = only - {slug for slug, _, _ in sets}
    if unknown:
        print(f"virt_install.py: no such option set: {', '.join(sorted(unknown))}",
              file=sys.stderr)
        return 2
    if only:
        sets = [s for s in sets if s[0] in only]
    written = 0
    for slug, args, env in sets:
        if env is False:
            print(f"virt-install {slug}: skipped (its OS id needs the newer osinfo-db: "
                  "VCP_OSINFO_DB, which tests/producers/regenerate sets)", file=sys.stderr)
            continue
        if any(subst.get(a) is None and a in subst for a in args):
            print(f"virt-install {slug}: skipped (no such machine type here)", file=sys.stderr)
            continue
        args = [subst.get(a, a) for a in args]
        cmd = ["virt-install", "--connect", uri, *BASE, *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0 or not r.stdout.lstrip().startswith("<domain"):
            msg = " ".join((r.stderr or r.stdout).split())
            print(f"virt-install {slug}: refused: {msg}", file=sys.stderr)
            continue
        (out / f"{slug}.xml").write_text(r.stdout)
        written += 1
    print(f"virt_install.py: {written} of {len(sets)} option sets written to {out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
