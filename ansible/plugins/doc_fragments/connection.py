# Copyright: virt-cpu-policy contributors
# SPDX-License-Identifier: Apache-2.0
"""The options every module that runs virt-cpu-policyd against libvirt shares."""

from __future__ import annotations


class ModuleDocFragment:
    """How a module reaches libvirt: through virt-cpu-policyd and a connection URI."""

    DOCUMENTATION = r"""
options:
  uri:
    description: The libvirt connection URI.
    type: str
    default: qemu:///system
  daemon_bin:
    description: The virt-cpu-policyd binary.
    type: path
    default: /usr/sbin/virt-cpu-policyd
"""
