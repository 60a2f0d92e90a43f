#!/usr/bin/python
# Copyright: virt-cpu-policy contributors
# SPDX-License-Identifier: Apache-2.0
"""Make the stored definitions of a libvirt host's guests conform, with virt-cpu-policyd apply."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apply
short_description: Make stored libvirt guest definitions conform to a virt-cpu-policy policy
description:
  - Runs C(virt-cpu-policyd apply --dry-run --all) with O(policy) to learn which persistent
    guests' stored definitions the policy changes, and the tool's own diff of each; unless in
    check mode, and when any would change, runs C(virt-cpu-policyd apply --all), which backs each
    old definition up and defines the new one. Check mode and the real run report the same
    guests with the same diffs (the tool's code is the same; only the define is skipped).
  - With C(--diff), each changed definition's diff is shown as the tool writes it
    (C(--- NAME (stored)), C(+++ NAME (conforming))), from the dry run made just before the
    change (C(apply) itself prints no diff). Stored definitions may hold secrets (a VNC
    password) in the lines around C(<cpu>); use C(no_log) where the output is kept.
  - A guest that cannot conform is not a failure of the module; it is listed in RV(refused) and
    said in a warning (C(virt-cpu-policy audit) reports it too).
options:
  policy:
    description: The policy file; the host's C(/etc/virt-cpu-policy/policy.toml) when not given.
    type: path
extends_documentation_fragment:
  - virt_cpu_policy.kvm.connection
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - virt-cpu-policy contributors
"""

EXAMPLES = r"""
- name: Make every stored definition conform
  virt_cpu_policy.kvm.apply:
    policy: /etc/virt-cpu-policy/policy.toml
"""

RETURN = r"""
guests:
  description: Each guest libvirt lists, with what apply did (C(unchanged), C(changed),
    C(refused), C(transient)) and its line of the tool's report.
  returned: success
  type: dict
changed_guests:
  description: The guests whose stored definition was (check mode, would be) rewritten.
  returned: success
  type: list
refused:
  description: The guests that cannot conform, each with the tool's reason.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

DIFF_LINE = (" ", "+", "-", "@", "\\")
RESULTS = ("unchanged", "would change", "changed", "refused", "transient")


def parse(out):
    """The report of `virt-cpu-policyd apply`: each guest's diff (when it changes) then its line
    `NAME: unchanged|would change|changed|refused: ...|transient ...`. Returns a list of
    (name, result, line, diff)."""
    guests = []
    diff = []
    in_diff = False
    for line in out.splitlines(keepends=True):
        if line.startswith("--- ") and line.rstrip().endswith(" (stored)"):
            in_diff = True
            diff = [line]
            continue
        if in_diff and line.startswith(DIFF_LINE):
            diff.append(line)
            continue
        in_diff = False
        found = [(line.find(f": {r}"), r) for r in RESULTS]
        found = [(pos, r) for pos, r in found if pos > 0]
        if not found:
            continue
        # The first result marker after the name (a reason may name another word later).
        pos, result = min(found)
        name = line[:pos]
        text = "".join(diff) if result in ("would change", "changed") else ""
        guests.append((name, "changed" if result == "would change" else result, line.rstrip("\n"), text))
        diff = []
    return guests


def main():
    module = AnsibleModule(
        argument_spec=dict(
            policy=dict(type="path"),
            uri=dict(type="str", default="qemu:///system"),
            daemon_bin=dict(type="path", default="/usr/sbin/virt-cpu-policyd"),
        ),
        supports_check_mode=True,
    )
    base = [module.params["daemon_bin"], "--uri", module.params["uri"]]
    if module.params["policy"]:
        base += ["--policy", module.params["policy"]]

    def run(dry_run):
        argv = base + ["apply"] + (["--dry-run"] if dry_run else []) + ["--all"]
        rc, out, err = module.run_command(argv)
        # 0: nothing refused; 1: some guest refused (cannot conform); 2: policy or connection.
        if rc not in (0, 1):
            module.fail_json(msg=f"virt-cpu-policyd apply failed: {err.strip()}", rc=rc,
                             stdout=out, stderr=err, cmd=argv)
        return parse(out)

    planned = run(dry_run=True)
    would = [g for g in planned if g[1] == "changed"]
    done = planned if module.check_mode or not would else run(dry_run=False)
    diffs = {g[0]: g[3] for g in planned}
    # The diff of each guest changed, as the dry run wrote it (`apply` itself writes none).
    changed = [(g[0], g[1], g[2], diffs.get(g[0]) or "") for g in done if g[1] == "changed"]
    refused = {g[0]: g[2] for g in done if g[1] == "refused"}
    result = dict(
        changed=bool(changed),
        guests={g[0]: dict(result=g[1], report=g[2]) for g in done},
        changed_guests=[g[0] for g in changed],
        refused=refused,
    )
    if module._diff and changed:
        result["diff"] = [
            dict(before_header=f"{g[0]} (stored)", after_header=f"{g[0]} (conforming)", prepared=g[3])
            for g in changed
        ]
    for line in refused.values():
        module.warn(line)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
