#!/usr/bin/python
# Copyright: virt-cpu-policy contributors
# SPDX-License-Identifier: Apache-2.0
"""Publish this host's facts (a <hostFacts> file) the way virt-cpu-policyd --publish does."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: publish_facts
short_description: Publish a libvirt host's facts as virt-cpu-policyd --publish does
description:
  - Makes this host's C(<hostFacts>) file (C(virsh capabilities), the domcapabilities of its arch
    and its libvirt version) with virt-cpu-policyd's own code, and puts it in O(publish_dir) as
    C(NAME.xml), NAME being libvirt's host name, exactly the file the daemon writes there with
    C(--publish). The file is replaced atomically and only when its content changed.
  - The facts are made by a one-shot C(virt-cpu-policyd apply --all) under a policy in audit
    mode, with the snapshot, the publish directory and the backups in a temporary directory, so
    no stored definition is changed and nothing outside O(publish_dir) is written. This stands
    in until virt-cpu-policy has a one-shot publisher of its own.
  - Returns the file's content so that the controller can compute the cluster CPU from every
    host's facts, in check mode too.
options:
  publish_dir:
    description: Where the facts are published (the daemon's C(--publish) directory).
    type: path
    default: /var/lib/virt-cpu-policy/published
extends_documentation_fragment:
  - virt_cpu_policy.kvm.connection
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: A new file is said in one line; a changed one is shown as a unified diff.
author:
  - virt-cpu-policy contributors
"""

EXAMPLES = r"""
- name: Publish this host's facts
  virt_cpu_policy.kvm.publish_facts:
    publish_dir: /var/lib/virt-cpu-policy/published
  register: facts
"""

RETURN = r"""
name:
  description: The host's name in its facts (libvirt's host name); the file is C(NAME.xml).
  returned: success
  type: str
path:
  description: The published file.
  returned: success
  type: str
content:
  description: The facts document.
  returned: success
  type: str
guests:
  description:
    - This host's guest facts (C(<guestFacts>), what C(virt-cpu-policy fleet) judges), or null
      from a virt-cpu-policyd that publishes none. Returned, not written to O(publish_dir), since the
      daemon keeps that file current itself, and a guest's state changes from run to run.
  returned: success
  type: str
libvirt:
  description: The libvirt version the facts name (C(<hostFacts libvirt=...>)), or null.
  returned: success
  type: str
"""

import difflib
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

# The guest facts the daemon publishes beside the host's (NAME.guests.xml).
GUESTS_SUFFIX = ".guests.xml"

# Audit mode: `apply` judges the guests and defines nothing.
AUDIT_POLICY = 'version = 1\nmode = "audit"\n'


def one_shot(module, tmp):
    """Run the daemon's publisher into tmp/published; returns (name, content, guests)."""
    policy = os.path.join(tmp, "policy.toml")
    with open(policy, "w") as f:
        f.write(AUDIT_POLICY)
    out_dir = os.path.join(tmp, "published")
    os.mkdir(out_dir)
    argv = [
        module.params["daemon_bin"],
        "--uri", module.params["uri"],
        "--policy", policy,
        "--snapshot-dir", os.path.join(tmp, "snapshot"),
        "--backup-dir", os.path.join(tmp, "backups"),
        "--publish", out_dir,
        "apply", "--all",
    ]
    rc, out, err = module.run_command(argv)
    # 0: every guest conforms; 1: some would change (audit mode: nothing defined); 2: failure.
    if rc not in (0, 1):
        module.fail_json(msg=f"virt-cpu-policyd could not publish this host's facts: {err.strip()}",
                         rc=rc, stderr=err, stdout=out, cmd=argv)
    # NAME.xml is the host's facts; NAME.guests.xml beside it, its guests' (for `fleet`).
    files = sorted(f for f in os.listdir(out_dir)
                   if f.endswith(".xml") and not f.endswith(GUESTS_SUFFIX))
    if len(files) != 1:
        module.fail_json(msg=f"virt-cpu-policyd published {len(files)} host facts files, expected one: {files}",
                         stderr=err)
    name = files[0][: -len(".xml")]
    with open(os.path.join(out_dir, files[0])) as f:
        content = f.read()
    guests = None
    if os.path.exists(os.path.join(out_dir, name + GUESTS_SUFFIX)):
        with open(os.path.join(out_dir, name + GUESTS_SUFFIX)) as f:
            guests = f.read()
    return name, content, guests


def main():
    module = AnsibleModule(
        argument_spec=dict(
            publish_dir=dict(type="path", default="/var/lib/virt-cpu-policy/published"),
            uri=dict(type="str", default="qemu:///system"),
            daemon_bin=dict(type="path", default="/usr/sbin/virt-cpu-policyd"),
        ),
        supports_check_mode=True,
    )
    tmp = tempfile.mkdtemp(prefix="vcp-publish-")
    try:
        name, content, guests = one_shot(module, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dest = os.path.join(module.params["publish_dir"], name + ".xml")
    try:
        with open(dest) as f:
            before = f.read()
    except FileNotFoundError:
        before = None
    changed = before != content
    if changed and not module.check_mode:
        os.makedirs(module.params["publish_dir"], mode=0o755, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=module.params["publish_dir"], prefix=".vcp-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(part, 0o644)
        os.replace(part, dest)
    m = re.search(r"<hostFacts[^>]*\blibvirt='([^']*)'", content)
    result = dict(changed=changed, name=name, path=dest, content=content, guests=guests,
                  libvirt=m.group(1) if m else None)
    if changed and module._diff:
        if before is None:
            text = f"{dest}: new ({len(content)} bytes, libvirt {result['libvirt']})\n"
        else:
            # What changed on the host: a new libvirt or QEMU, microcode, a machine type.
            text = "".join(difflib.unified_diff(before.splitlines(True), content.splitlines(True),
                                                f"{dest} (published)", f"{dest} (this host now)"))
        result["diff"] = dict(before_header=dest, after_header=dest, prepared=text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
