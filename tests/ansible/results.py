"""Reads what ansible-playbook's JSON callback (ansible.posix.json) wrote, for tests/ansible/run.

  results.py changed RUN.json            each changed task as `HOST<TAB>ROLE : TASK`, sorted
  results.py recap RUN.json              `HOST changed=N failed=N unreachable=N` per host
  results.py diffs RUN.json OUT_DIR      every diff a task gave, one file per (host, task, item),
                                         named HOST--TASK--N; their list on stdout (diffs
                                         of tasks that changed something only)
  results.py fact RUN.json HOST NAME     the value of a fact set by set_fact, as JSON
  results.py same CHECK.json RUN.json    exit 0 when the check-mode run and the real run changed
                                         the same tasks on the same hosts with the same diffs,
                                         else print what differs and exit 1

A task counts once per host, a loop's items together. Handlers count as tasks: in check mode the
collection's handlers say what they would do.
"""

import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def tasks(doc):
    for play in doc.get("plays", []):
        for t in play.get("tasks", []):
            # "virt_cpu_policy.kvm.virt_cpu_policy : Install the .deb" -> "Install the .deb"
            yield t["task"]["name"].split(" : ", 1)[-1], t.get("hosts", {})


def changed(doc):
    out = set()
    for name, hosts in tasks(doc):
        for host, r in hosts.items():
            if r.get("changed"):
                out.add((host, name))
    return out


def diff_text(d):
    if "prepared" in d:
        return d["prepared"]
    before, after = d.get("before", ""), d.get("after", "")
    if isinstance(before, dict) or isinstance(after, dict):
        return json.dumps({"before": before, "after": after}, sort_keys=True)
    import difflib

    # Not the headers: Ansible names the rendered template by a temporary path of the run.
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        "before", "after"))


def diffs(doc):
    """(host, task, n) -> diff text, for every diff of a change that shows something."""
    out = {}
    for name, hosts in tasks(doc):
        for host, r in hosts.items():
            results = r.get("results") if isinstance(r.get("results"), list) else [r]
            n = 0
            for item in results:
                if not item.get("changed"):
                    continue
                ds = item.get("diff", [])
                for d in ds if isinstance(ds, list) else [ds]:
                    text = diff_text(d) if d else ""
                    if text.strip():
                        out[(host, name, n)] = text
                        n += 1
    return out


def main():
    cmd = sys.argv[1]
    doc = load(sys.argv[2])
    if cmd == "changed":
        for host, name in sorted(changed(doc)):
            print(f"{host}\t{name}")
    elif cmd == "recap":
        for host, s in sorted(doc["stats"].items()):
            print(f"{host} changed={s['changed']} failed={s['failures']} unreachable={s['unreachable']}")
    elif cmd == "diffs":
        os.makedirs(sys.argv[3], exist_ok=True)
        for (host, name, n), text in sorted(diffs(doc).items()):
            fname = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{host}--{name}--{n}")
            with open(os.path.join(sys.argv[3], fname), "w") as f:
                f.write(text)
            print(fname)
    elif cmd == "fact":
        host, fact = sys.argv[3], sys.argv[4]
        value = None
        for _, hosts in tasks(doc):
            r = hosts.get(host, {})
            if fact in r.get("ansible_facts", {}):
                value = r["ansible_facts"][fact]
        print(json.dumps(value))
    elif cmd == "msg":
        # The `msg` of task NAME (a debug task) on every host that ran it.
        for name, hosts in tasks(doc):
            if name == sys.argv[3]:
                for host, r in sorted(hosts.items()):
                    if "msg" in r and not r.get("skipped"):
                        print(f"{host}\t{r['msg']}")
    elif cmd == "same":
        real = load(sys.argv[3])
        ok = True
        c, r = changed(doc), changed(real)
        for host, name in sorted(c - r):
            print(f"check mode said changed, the run did not: {host}: {name}")
            ok = False
        for host, name in sorted(r - c):
            print(f"the run changed, check mode did not say so: {host}: {name}")
            ok = False
        dc, dr = diffs(doc), diffs(real)
        for key in sorted(set(dc) | set(dr)):
            if dc.get(key) != dr.get(key):
                print(f"diff differs: {key[0]}: {key[1]} #{key[2]}")
                print("--- check mode:\n" + (dc.get(key) or "(none)\n") + "--- run:\n" + (dr.get(key) or "(none)\n"))
                ok = False
        print(f"{len(c)} changed task(s) and {len(dc)} diff(s) in check mode; {len(r)} and {len(dr)} in the run")
        sys.exit(0 if ok else 1)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
