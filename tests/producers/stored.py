#!/usr/bin/python3
"""libvirt's stored and live forms of producer documents (issue 19's corpus).

    tests/producers/stored.py URI INDIR OUTDIR

For every INDIR/*.xml (documents a producer made for this libvirt), on the libvirt at URI:

  * `virsh define`, then `virsh dumpxml --inactive`: the stored form, what libvirt keeps in
    /etc/libvirt/qemu and what the daemon and `audit` read, written to OUTDIR/stored/NAME.xml;
  * for a TCG guest (`<domain type='qemu'>`) that starts as it is: `virsh start --paused`,
    `virsh dumpxml` (the live form, what a running guest's XML is), `virsh destroy`, written to
    OUTDIR/live/NAME.xml;
  * `virsh undefine`.

A document libvirt refuses at define or start is listed on stderr with libvirt's message.
While defined, a guest is named `vcp-prod-<pid>-<n>`; the files carry the producer's own name
back (only the `<name>` element is replaced, nothing else). Every guest of this run is destroyed
and undefined at the end, also on failure or interrupt.

Standard library only.
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

PREFIX = f"vcp-prod-{os.getpid()}-"
NAME_RE = re.compile(r"<name>([^<]*)</name>")


def virsh(uri, *args):
    r = subprocess.run(["virsh", "-c", uri, *args], capture_output=True, text=True)
    return r.returncode == 0, r.stdout, " ".join(r.stderr.split())


def cleanup(uri):
    ok, out, _ = virsh(uri, "list", "--all", "--name")
    for name in out.split():
        if name.startswith(PREFIX):
            virsh(uri, "destroy", name)
            virsh(uri, "undefine", name)


def main():
    if len(sys.argv) != 4:
        print("usage: stored.py URI INDIR OUTDIR", file=sys.stderr)
        return 2
    uri, indir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    (out / "stored").mkdir(parents=True, exist_ok=True)
    (out / "live").mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    counts = {"documents": 0, "stored": 0, "live": 0}
    try:
        for n, src in enumerate(sorted(indir.glob("*.xml"))):
            counts["documents"] += 1
            text = src.read_text()
            m = NAME_RE.search(text)
            if not m:
                print(f"{src.name}: no <name>", file=sys.stderr)
                continue
            original = m.group(1)
            name = f"{PREFIX}{n}"
            tmp = out / f".{name}.xml"
            tmp.write_text(text[: m.start(1)] + name + text[m.end(1):])
            ok, _, err = virsh(uri, "define", str(tmp))
            tmp.unlink()
            if not ok:
                print(f"{src.name}: refused at define: {err}", file=sys.stderr)
                continue

            def restore(xml):
                return xml.replace(f"<name>{name}</name>", f"<name>{original}</name>", 1)

            ok, stored, err = virsh(uri, "dumpxml", "--inactive", name)
            if ok:
                (out / "stored" / src.name).write_text(restore(stored))
                counts["stored"] += 1
            if re.search(r"<domain[^>]*\btype=['\"]qemu['\"]", text):
                ok, _, err = virsh(uri, "start", "--paused", name)
                if ok:
                    ok, live, err = virsh(uri, "dumpxml", name)
                    virsh(uri, "destroy", name)
                    if ok:
                        (out / "live" / src.name).write_text(restore(live))
                        counts["live"] += 1
                else:
                    print(f"{src.name}: refused at start: {err}", file=sys.stderr)
            virsh(uri, "undefine", name)
    finally:
        cleanup(uri)
    print(f"stored.py {uri}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
