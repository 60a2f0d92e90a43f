#!/usr/bin/env python3
"""Guest domain XML made by OpenStack Nova's own libvirt driver (issue 19's producer corpus).

Run with the Python of a venv holding the pinned `nova` (tests/producers/nova-requirements.txt;
tests/producers/regenerate makes it):

    python3 tests/producers/nova_guests.py OUTDIR [LIBVIRT:QEMU ...]

For every case below and every (libvirt, QEMU) version pair given (default HOST_VERSIONS), it
writes OUTDIR/<libvirt>/<case>.xml, the text of

    LibvirtDriver._get_guest_config(instance, network_info, image_meta, disk_info).to_xml()

which is what nova-compute hands libvirt's defineXML (`_get_guest_xml` adds only a debug log),
after `init_host()` has run its checks of the [libvirt]/[compute] options.

What is real: Nova 34's driver, config objects, flavor/image/NUMA logic (hardware.py), the
scheduler's own NUMA fitting (`numa_fit_instance_to_host`, what the resource tracker's claim
does), `blockinfo.get_disk_info`, the VIF driver.

What is faked, and how (all from Nova's own test tree, shipped in the package):
  * libvirt itself: `nova.tests.fixtures.libvirt` (fakelibvirt), through `LibvirtFixture`, as
    Nova's unit and functional tests do. The fake host is a `fakelibvirt.HostInfo` (NUMA nodes,
    sockets, cores, threads: per case) reporting the libvirt/QEMU versions asked for.
    fakelibvirt's host CPU is its fixed Penryn (for `cpu_mode = custom` model checks and
    `trait:` model selection) and its capabilities list fakelibvirt's machine types.
  * cgroups (`CGroupsFixture`), os-vif (`LibvirtFixture` stubs plugging), Glance (`GlanceFixture`).
  * The network: one VIF shaped as Nova's `fake_network.fake_get_instance_nw_info` builds it,
    made an Open vSwitch port (ML2/OVS), with fixed ids so the output is reproducible.
  * The clock (2026-01-01 12:00:00 UTC: oslo's TimeFixture and nova.virt.driver's time.time) and the instances path (Nova's
    default, /var/lib/nova/instances; nothing is written there).
  * The instance: a `nova.objects.Instance` built the way Nova's unit tests build theirs
    (`_create_test_instance` in test_driver.py), with a fixed uuid and name `instance-00000001`.

Nothing here edits Nova's output: the file is `to_xml()` as returned.
"""

import os
import sys
import datetime
import types
import unittest

import fixtures  # noqa: E402
from nova import objects  # noqa: E402
from nova import test  # noqa: E402
from nova.network import model as network_model  # noqa: E402
from nova.objects import fields  # noqa: E402
from nova.tests import fixtures as nova_fixtures  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.unit import fake_network  # noqa: E402
from nova.virt import fake  # noqa: E402
from nova.virt import hardware  # noqa: E402
from nova.virt.libvirt import blockinfo  # noqa: E402
from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402
from oslo_utils import versionutils  # noqa: E402
from oslo_utils.fixture import TimeFixture  # noqa: E402

objects.register_all()

# (libvirt, QEMU) the fake host reports by default: the rig's generations Nova 34 supports (its
# MIN_LIBVIRT_VERSION is 8.0.0, so bullseye's 7.0 has no Nova of this release).
HOST_VERSIONS = [("9.0.0", "7.2.0"), ("11.3.0", "10.0.0"), ("12.8.0", "11.1.0")]

CREATION_TIME = 1767268800.0  # 2026-01-01 12:00:00 UTC
INSTANCE_UUID = "5e6a0c2e-8f3b-4a3e-9d1c-7b2f0a9c1d01"
VIF_ID = "3f1c2b9a-6d2e-4c1b-8a7f-0e9d8c7b6a51"
NETWORK_ID = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c61"

# Host shapes (fakelibvirt.HostInfo keyword arguments); Host.get_online_cpus is mocked to
# range(16) by LibvirtFixture, so a host has at most 16 CPUs.
HOST_SMALL = dict(cpu_nodes=1, cpu_sockets=1, cpu_cores=4, cpu_threads=2)
HOST_NUMA = dict(cpu_nodes=2, cpu_sockets=1, cpu_cores=4, cpu_threads=2)

# Each case: flavor (vcpus, memory_mb, extra_specs), image properties, [libvirt] and [compute]
# options, host shape. Defaults: 2 vCPUs, 512 MiB, virt_type kvm, Nova's default cpu_mode
# (host-model on x86), Nova's default machine type (pc on x86).
CASES = {
    # --- Nova's defaults and [libvirt] cpu_mode / cpu_models / cpu_model_extra_flags
    "default": {},
    "tcg-default": {"libvirt": {"virt_type": "qemu"}},
    "host-passthrough": {"libvirt": {"cpu_mode": "host-passthrough"}},
    "tcg-host-passthrough": {"libvirt": {"virt_type": "qemu", "cpu_mode": "host-passthrough"}},
    "cpu-mode-none": {"libvirt": {"cpu_mode": "none"}},
    "tcg-cpu-mode-none": {"libvirt": {"virt_type": "qemu", "cpu_mode": "none"}},
    # KVM: init_host() compares the model with the host CPU, fakelibvirt's Penryn.
    "custom-penryn": {"libvirt": {"cpu_mode": "custom", "cpu_models": ["Penryn"]}},
    "tcg-custom-nehalem": {
        "libvirt": {"virt_type": "qemu", "cpu_mode": "custom", "cpu_models": ["Nehalem"]}
    },
    "tcg-custom-penryn-flags": {
        "libvirt": {
            "virt_type": "qemu",
            "cpu_mode": "custom",
            "cpu_models": ["Penryn"],
            "cpu_model_extra_flags": ["pcid", "-hle", "+ssse3"],
        }
    },
    "custom-penryn-flags": {
        "libvirt": {
            "cpu_mode": "custom",
            "cpu_models": ["Penryn"],
            "cpu_model_extra_flags": ["pcid", "-vmx"],
        }
    },
    "tcg-custom-qemu64": {
        "libvirt": {"virt_type": "qemu", "cpu_mode": "custom", "cpu_models": ["qemu64"]}
    },
    "host-model-flags": {
        "libvirt": {"cpu_mode": "host-model", "cpu_model_extra_flags": ["-hle", "pdpe1gb"]}
    },
    "tcg-host-model-flags": {
        "libvirt": {
            "virt_type": "qemu",
            "cpu_mode": "host-model",
            "cpu_model_extra_flags": ["-pcid"],
        }
    },
    # The model is chosen by the trait's flag from fakelibvirt's baselineCPU (Penryn + aes).
    "tcg-custom-trait-aes": {
        "flavor": {"extra_specs": {"trait:HW_CPU_X86_AESNI": "required"}},
        "libvirt": {
            "virt_type": "qemu",
            "cpu_mode": "custom",
            "cpu_models": ["Penryn", "Nehalem"],
        },
    },
    # --- machine types: image hw_machine_type, [libvirt] hw_machine_type
    "q35-image": {"image": {"hw_machine_type": "q35"}},
    "tcg-q35-image": {"image": {"hw_machine_type": "q35"}, "libvirt": {"virt_type": "qemu"}},
    "tcg-q35-conf": {"libvirt": {"virt_type": "qemu", "hw_machine_type": ["x86_64=q35"]}},
    # Versioned types: Nova checks them against the host's capabilities, here fakelibvirt's
    # (QEMU 2.x era) list; 2.11 is on every real QEMU of the rig too.
    "tcg-pc-i440fx-2.11": {
        "image": {"hw_machine_type": "pc-i440fx-2.11"},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-pc-q35-2.11": {
        "image": {"hw_machine_type": "pc-q35-2.11"},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-pc-q35-2.11-288-vcpus": {
        "flavor": {"vcpus": 288},
        "image": {"hw_machine_type": "pc-q35-2.11"},
        "libvirt": {"virt_type": "qemu"},
    },
    # --- vCPU counts and topology (flavor hw:cpu_*, image hw_cpu_*)
    "tcg-8-vcpus": {"flavor": {"vcpus": 8}, "libvirt": {"virt_type": "qemu"}},
    "tcg-topology-flavor": {
        "flavor": {"vcpus": 8, "extra_specs": {"hw:cpu_sockets": "2", "hw:cpu_cores": "2",
                                                "hw:cpu_threads": "2"}},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-topology-max-sockets": {
        "flavor": {"vcpus": 6, "extra_specs": {"hw:cpu_max_sockets": "1"}},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-topology-image": {
        "flavor": {"vcpus": 4},
        "image": {"hw_cpu_sockets": 1, "hw_cpu_cores": 2, "hw_cpu_threads": 2},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-topology-image-max-threads": {
        "flavor": {"vcpus": 12, "extra_specs": {"hw:cpu_max_threads": "2"}},
        "image": {"hw_cpu_max_sockets": 2},
        "libvirt": {"virt_type": "qemu"},
    },
    "kvm-topology-cores": {
        "flavor": {"vcpus": 16, "extra_specs": {"hw:cpu_sockets": "1"}},
    },
    "tcg-q35-64-vcpus": {
        "flavor": {"vcpus": 64},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-pc-240-vcpus": {"flavor": {"vcpus": 240}, "libvirt": {"virt_type": "qemu"}},
    "tcg-q35-255-vcpus": {
        "flavor": {"vcpus": 255},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
    },
    "q35-288-vcpus": {"flavor": {"vcpus": 288}, "image": {"hw_machine_type": "q35"}},
    "tcg-q35-288-vcpus-intel-iommu": {
        "flavor": {"vcpus": 288, "extra_specs": {"hw:viommu_model": "intel"}},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
    },
    # --- vIOMMU (hw:viommu_model / hw_viommu_model)
    "tcg-q35-viommu-intel": {
        "flavor": {"extra_specs": {"hw:viommu_model": "intel"}},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-q35-viommu-auto": {
        "image": {"hw_machine_type": "q35", "hw_viommu_model": "auto"},
        "libvirt": {"virt_type": "qemu"},
    },
    "tcg-q35-viommu-virtio": {
        "image": {"hw_machine_type": "q35", "hw_viommu_model": "virtio"},
        "libvirt": {"virt_type": "qemu"},
    },
    "q35-viommu-intel-8": {
        "flavor": {"vcpus": 8, "extra_specs": {"hw:viommu_model": "intel"}},
        "image": {"hw_machine_type": "q35"},
    },
    # --- guest NUMA (hw:numa_nodes, hw:numa_cpus.N / hw:numa_mem.N) and pinning
    "tcg-numa-2": {
        "flavor": {"vcpus": 4, "extra_specs": {"hw:numa_nodes": "2"}},
        "libvirt": {"virt_type": "qemu"},
        "host": HOST_NUMA,
    },
    "tcg-numa-asymmetric": {
        "flavor": {"vcpus": 6, "memory_mb": 768, "extra_specs": {
            "hw:numa_nodes": "2", "hw:numa_cpus.0": "0,1", "hw:numa_cpus.1": "2-5",
            "hw:numa_mem.0": "256", "hw:numa_mem.1": "512"}},
        "libvirt": {"virt_type": "qemu"},
        "host": HOST_NUMA,
    },
    "numa-2-q35": {
        "flavor": {"vcpus": 8, "extra_specs": {"hw:numa_nodes": "2"}},
        "image": {"hw_machine_type": "q35"},
        "host": HOST_NUMA,
    },
    "tcg-pinned": {
        "flavor": {"vcpus": 4, "extra_specs": {"hw:cpu_policy": "dedicated"}},
        "libvirt": {"virt_type": "qemu"},
        "compute": {"cpu_dedicated_set": "2-15", "cpu_shared_set": "0-1"},
        "host": HOST_NUMA,
    },
    # isolate wants a host without SMT (on an SMT host Nova refuses it: bug #1889633).
    "pinned-isolate": {
        "flavor": {"vcpus": 4, "extra_specs": {"hw:cpu_policy": "dedicated",
                                                "hw:cpu_thread_policy": "isolate"}},
        "compute": {"cpu_dedicated_set": "0-7"},
        "host": dict(cpu_nodes=2, cpu_sockets=1, cpu_cores=4, cpu_threads=1),
    },
    "pinned-require": {
        "flavor": {"vcpus": 4, "extra_specs": {"hw:cpu_policy": "dedicated",
                                                "hw:cpu_thread_policy": "require"}},
        "compute": {"cpu_dedicated_set": "0-15"},
        "host": HOST_NUMA,
    },
    "tcg-pinned-numa-2-topology": {
        "flavor": {"vcpus": 8, "extra_specs": {"hw:cpu_policy": "dedicated",
                                                "hw:numa_nodes": "2",
                                                "hw:cpu_sockets": "2",
                                                "hw:cpu_threads": "2"}},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
        "compute": {"cpu_dedicated_set": "0-15"},
        "host": HOST_NUMA,
    },
    "tcg-shared-set": {
        "flavor": {"vcpus": 2},
        "libvirt": {"virt_type": "qemu"},
        "compute": {"cpu_shared_set": "0-3"},
    },
    # --- other CPU knobs Nova writes into <cpu>
    "tcg-maxphysaddr-emulate": {
        "flavor": {"extra_specs": {"hw:maxphysaddr_mode": "emulate",
                                   "hw:maxphysaddr_bits": "42"}},
        "image": {"hw_machine_type": "q35"},
        "libvirt": {"virt_type": "qemu"},
    },
    "maxphysaddr-passthrough": {
        "flavor": {"extra_specs": {"hw:maxphysaddr_mode": "passthrough"}},
        "libvirt": {"cpu_mode": "host-passthrough"},
    },
    "tcg-pmu-off": {
        "flavor": {"extra_specs": {"hw:pmu": "false"}},
        "libvirt": {"virt_type": "qemu"},
    },
    # --- emulated aarch64 on the x86 host (image hw_architecture / hw_emulation_architecture)
    "tcg-aarch64-emulated": {
        "image": {"hw_emulation_architecture": "aarch64"},
        "libvirt": {"virt_type": "qemu"},
    },
}

DEFAULT_LIBVIRT = {
    "virt_type": "kvm",
    "cpu_mode": None,
    "cpu_models": [],
    "cpu_model_extra_flags": [],
    "hw_machine_type": None,
}
DEFAULT_COMPUTE = {"cpu_dedicated_set": None, "cpu_shared_set": None}


def network_info(testcase):
    """One VIF as Nova's `fake_get_instance_nw_info` builds it, with fixed ids."""
    nw = fake_network.fake_get_instance_nw_info(testcase, 1)
    vif = nw[0]
    vif["id"] = VIF_ID
    vif["address"] = "fa:16:3e:4c:2c:30"
    vif["network"]["id"] = NETWORK_ID
    # ML2/OVS, the common Neutron back end (the Linux bridge VIF is gone from Nova 34).
    vif["type"] = network_model.VIF_TYPE_OVS
    vif["details"] = {network_model.VIF_DETAILS_PORT_FILTER: True}
    vif["devname"] = "tap" + VIF_ID[:11]
    return nw


class NovaGuests(test.NoDBTestCase):
    """Nova's own unit-test base (config fixtures, no database) around the driver."""

    out_dir = None
    versions = HOST_VERSIONS

    def setUp(self):
        super().setUp()
        self.libvirt = self.useFixture(nova_fixtures.LibvirtFixture())
        self.useFixture(nova_fixtures.CGroupsFixture())
        self.useFixture(nova_fixtures.GlanceFixture(self))
        # Nova's default instances_path, and a fixed clock for <nova:creationTime>.
        self.flags(instances_path="/var/lib/nova/instances")
        # (the driver metadata reads time.time() through nova.virt.driver's `time`).
        self.useFixture(TimeFixture(datetime.datetime(2026, 1, 1, 12, 0, 0)))
        self.useFixture(fixtures.MonkeyPatch(
            "nova.virt.driver.time", types.SimpleNamespace(time=lambda: CREATION_TIME)))

    def make(self, case, libvirt_version, qemu_version):
        conf = dict(DEFAULT_LIBVIRT, **case.get("libvirt", {}))
        self.flags(group="libvirt", **conf)
        self.flags(group="compute", **dict(DEFAULT_COMPUTE, **case.get("compute", {})))

        host_info = fakelibvirt.HostInfo(**case.get("host", HOST_SMALL))
        connection = fakelibvirt.Connection(
            "qemu:///system",
            version=versionutils.convert_version_to_int(libvirt_version),
            hv_version=versionutils.convert_version_to_int(qemu_version),
            host_info=host_info,
        )
        drvr = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        drvr._host.get_connection = lambda: connection
        drvr.init_host("compute1")

        fl = case.get("flavor", {})
        flavor = objects.Flavor(
            id=42, flavorid="vcp-prod", name="vcp-prod", vcpus=fl.get("vcpus", 2),
            memory_mb=fl.get("memory_mb", 512), root_gb=1, ephemeral_gb=0, swap=0,
            vcpu_weight=None, rxtx_factor=1.0, extra_specs=dict(fl.get("extra_specs", {})),
        )
        image_meta = objects.ImageMeta.from_dict(
            {"disk_format": "raw", "properties": dict(case.get("image", {}))}
        )
        instance = objects.Instance(
            id=1, uuid=INSTANCE_UUID, project_id="fake", user_id="fake",
            display_name="vcp-prod", image_ref="155d900f-4e14-4e4c-a73d-069cbf4541e6",
            root_gb=1, ephemeral_gb=0, flavor=flavor, vcpus=flavor.vcpus,
            memory_mb=flavor.memory_mb, os_type="linux", pci_devices=objects.PciDeviceList(),
            numa_topology=None, config_drive=None, vm_mode=None, kernel_id=None,
            ramdisk_id=None, vcpu_model=None, host="compute1", node="compute1",
            system_metadata={"image_disk_format": "raw"}, trusted_certs=None, resources=None,
            migration_context=None, ephemeral_key_uuid=None, instance_type_id=42,
        )
        # What the scheduler and the resource tracker's claim do: the flavor/image NUMA
        # constraints, fitted to this host's NUMA topology (pinning included).
        constraints = hardware.numa_get_constraints(flavor, image_meta)
        if constraints is not None:
            host_topology = drvr._get_host_numa_topology()
            fitted = hardware.numa_fit_instance_to_host(
                host_topology, constraints, provider_mapping=None
            )
            if fitted is None:
                raise RuntimeError("the NUMA constraints do not fit the fake host")
            instance.numa_topology = fitted
        disk_info = blockinfo.get_disk_info(
            conf["virt_type"], instance, image_meta
        )
        cfg = drvr._get_guest_config(instance, network_info(self), image_meta, disk_info)
        return cfg.to_xml()

    def test_generate(self):
        failures = []
        for name, case in CASES.items():
            for lv, qv in self.versions:
                try:
                    xml = self.make(case, lv, qv)
                except Exception as e:  # a case Nova refuses is reported, never written
                    failures.append(f"{name}@{lv}: {type(e).__name__}: {e}")
                    continue
                os.makedirs(os.path.join(self.out_dir, lv), exist_ok=True)
                with open(os.path.join(self.out_dir, lv, f"{name}.xml"), "w") as f:
                    f.write(xml if xml.endswith("\n") else xml + "\n")
        for f in failures:
            print("nova refused:", f, file=sys.stderr)
        self.assertEqual([], failures)


def main():
    if len(sys.argv) < 2:
        print("usage: nova_guests.py OUTDIR [LIBVIRT:QEMU ...]", file=sys.stderr)
        return 2
    NovaGuests.out_dir = sys.argv[1]
    if len(sys.argv) > 2:
        NovaGuests.versions = [tuple(a.split(":", 1)) for a in sys.argv[2:]]
    os.makedirs(NovaGuests.out_dir, exist_ok=True)
    suite = unittest.TestLoader().loadTestsFromTestCase(NovaGuests)
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
