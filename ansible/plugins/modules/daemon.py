#!/usr/bin/python
# Copyright: virt-cpu-policy contributors
# SPDX-License-Identifier: Apache-2.0
"""Run virt-cpu-policyd on a host without systemd (a pid file, no init system)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: daemon
short_description: Keep virt-cpu-policyd running on a host without systemd
description:
  - On hosts with systemd the package's unit runs virt-cpu-policyd (the role's C(daemon) step uses
    C(ansible.builtin.systemd_service)). Containers, chroots and hosts with another init system
    have none; this module keeps the daemon running there, known by a pid file.
  - O(state=started) starts it when it is not running, and restarts it when it runs with other
    arguments than O(argv). O(state=reloaded) sends it SIGHUP (it reloads its policy and
    reconciles every guest), or starts it. O(state=stopped) sends SIGTERM and waits.
  - With O(name) instead of O(argv), the module only signals a daemon it does not run, such as
    libvirtd without systemd (libvirt reads its hooks when it starts and on SIGHUP);
    O(state=reloaded) sends SIGHUP when the pid file names a live process of that name, and
    does nothing when none runs.
  - A process counts as the daemon only when the pid file names a live process whose command
    line is O(argv) (for a restart, whose first argument is O(argv)'s), or whose name is O(name);
    a stale pid file never makes it signal another process.
options:
  argv:
    description: The daemon's command line, the binary first.
    type: list
    elements: str
  name:
    description: The name of a daemon this module only signals (C(/proc/PID/comm)), for
      O(state=reloaded).
    type: str
  pidfile:
    description: Its pid file.
    type: path
    default: /run/virt-cpu-policyd.pid
  log:
    description: Where its standard output and standard error go (it logs to journald when
      journald runs, else to standard error).
    type: path
    default: /var/log/virt-cpu-policy/daemon.log
  state:
    description: What to make of it.
    type: str
    choices: [started, reloaded, stopped]
    default: started
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - virt-cpu-policy contributors
"""

EXAMPLES = r"""
- name: Run virt-cpu-policyd with --publish
  virt_cpu_policy.kvm.daemon:
    argv: [/usr/sbin/virt-cpu-policyd, --publish, /var/lib/virt-cpu-policy/published, daemon]
"""

RETURN = r"""
pid:
  description: The daemon's process id, or null when it does not run.
  returned: success
  type: int
action:
  description: What was (check mode, would be) done, C(none), C(started), C(restarted),
    C(reloaded) or C(stopped).
  returned: success
  type: str
"""

import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def running(module):
    """(pid, its command line) of the daemon the pid file names, or (None, None)."""
    try:
        with open(module.params["pidfile"]) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None, None
    argv = cmdline(pid)
    if not argv:
        return None, None
    if module.params["name"]:
        return (pid, argv) if comm(pid) == module.params["name"] else (None, None)
    if argv[0] != module.params["argv"][0]:
        return None, None
    return pid, argv


def start(module):
    """Start the daemon detached (double fork, new session); returns its pid."""
    argv = module.params["argv"]
    log = module.params["log"]
    os.makedirs(os.path.dirname(log), mode=0o755, exist_ok=True)
    rfd, wfd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(rfd)
        os.setsid()
        grandchild = os.fork()
        if grandchild:
            os.write(wfd, str(grandchild).encode())
            os._exit(0)
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 1024)
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(wfd)
    os.waitpid(child, 0)
    with os.fdopen(rfd) as r:
        pid = int(r.read())
    with open(module.params["pidfile"], "w") as f:
        f.write(f"{pid}\n")
    # A policy that does not load, or no libvirt: the daemon exits at once. Say why.
    time.sleep(1)
    if cmdline(pid) != argv:
        with open(log, errors="replace") as f:
            tail = f.readlines()[-5:]
        module.fail_json(msg=f"{argv[0]} exited at start: {''.join(tail).strip()}", argv=argv)
    return pid


def stop(pid):
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if cmdline(pid) is None:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argv=dict(type="list", elements="str"),
            name=dict(type="str"),
            pidfile=dict(type="path", default="/run/virt-cpu-policyd.pid"),
            log=dict(type="path", default="/var/log/virt-cpu-policy/daemon.log"),
            state=dict(type="str", choices=["started", "reloaded", "stopped"], default="started"),
        ),
        supports_check_mode=True,
        mutually_exclusive=[("argv", "name")],
        required_one_of=[("argv", "name")],
    )
    state = module.params["state"]
    if module.params["name"] and state != "reloaded":
        module.fail_json(msg="name= only signals a daemon: state=reloaded")
    pid, argv = running(module)
    if module.params["name"]:
        action = "reloaded" if pid else "none"
        if pid and not module.check_mode:
            os.kill(pid, signal.SIGHUP)
        module.exit_json(changed=action != "none", action=action, pid=pid)
    if state == "stopped":
        action = "stopped" if pid else "none"
    elif pid is None:
        action = "started"
    elif argv != module.params["argv"]:
        action = "restarted"
    elif state == "reloaded":
        action = "reloaded"
    else:
        action = "none"
    if not module.check_mode:
        if action in ("stopped", "restarted"):
            stop(pid)
            pid = None
        if action in ("started", "restarted"):
            pid = start(module)
        if action == "reloaded":
            os.kill(pid, signal.SIGHUP)
    module.exit_json(changed=action != "none", action=action, pid=pid)


if __name__ == "__main__":
    main()
