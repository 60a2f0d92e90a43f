#!/usr/bin/python3
"""Deduplicate a staging tree of producer documents into tests/data/producers (issue 19).

    tests/producers/collect.py STAGE DEST

STAGE/<libvirt version>/<producer>/<form>/<source>.xml are the documents as made (the version is
the libvirt they were made for or on; `tests/producers/regenerate` lays them out). Identical
documents (byte for byte) are kept once. DEST is replaced by:

  DEST/<producer>/<form>/<source>.xml   one file per distinct document (`<source>@<version>.xml`
                                        when one source gave different documents on different
                                        libvirts)
  DEST/MANIFEST.tsv                     one line per file: file, libvirt versions it was made
                                        for, every producer/form/source@version that gave it

The differential test (tests/integration/producers.rs) reads MANIFEST.tsv.

Standard library only.
"""

import hashlib
import shutil
import sys
from collections import defaultdict
from pathlib import Path


def version_key(v):
    return tuple(int(p) for p in v.split("."))


def main():
    if len(sys.argv) != 3:
        print("usage: collect.py STAGE DEST", file=sys.stderr)
        return 2
    stage, dest = Path(sys.argv[1]), Path(sys.argv[2])
    # (producer, form, source) -> {version: digest}; digest -> text and origins
    by_source = defaultdict(dict)
    texts, origins = {}, defaultdict(list)
    for path in sorted(stage.glob("*/*/*/*.xml")):
        version, producer, form = path.parts[-4], path.parts[-3], path.parts[-2]
        source = path.stem
        text = path.read_text()
        digest = hashlib.sha256(text.encode()).hexdigest()
        texts[digest] = text
        by_source[(producer, form, source)][version] = digest
        origins[digest].append((producer, form, source, version))

    if dest.exists():
        shutil.rmtree(dest)
    rows, written = [], set()
    # The first origin (producer, form, source, oldest version) names each distinct document.
    for digest, orig in sorted(origins.items(), key=lambda kv: min(kv[1])):
        producer, form, source, _ = min(orig, key=lambda o: (o[:3], version_key(o[3])))
        versions = sorted({o[3] for o in orig}, key=version_key)
        if len(set(by_source[(producer, form, source)].values())) == 1:
            name = f"{source}.xml"
        else:
            mine = sorted((v for v, d in by_source[(producer, form, source)].items()
                           if d == digest), key=version_key)
            name = f"{source}@{mine[0]}.xml"
        rel = Path(producer) / form / name
        assert rel not in written, rel
        written.add(rel)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(texts[digest])
        made = ",".join(f"{p}/{f}/{s}@{v}" for p, f, s, v in
                        sorted(orig, key=lambda o: (o[:3], version_key(o[3]))))
        rows.append(f"{rel}\t{','.join(versions)}\t{made}")
    rows.sort()
    header = ("# file\tlibvirt versions it was made for\tproducer/form/source@version of every "
              "identical document\n")
    (dest / "MANIFEST.tsv").write_text(header + "\n".join(rows) + "\n")
    total = sum(len(o) for o in origins.values())
    print(f"collect.py: {total} documents, {len(rows)} distinct, in {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
