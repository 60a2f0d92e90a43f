#!/usr/bin/python3
"""Deduplicate a staging tree of producer documents into tests/data/producers (issue 19).

    tests/producers/collect.py [--add] STAGE DEST

STAGE/<libvirt version>/<producer>/<form>/<source>.xml are the documents as made (the version is
the libvirt they were made for or on; `tests/producers/regenerate` lays them out). Identical
documents (byte for byte) are kept once. DEST is replaced by:

  DEST/<producer>/<form>/<source>.xml   one file per distinct document (`<source>@<version>.xml`
                                        when one source gave different documents on different
                                        libvirts)
  DEST/MANIFEST.tsv                     one line per file: file, libvirt versions it was made
                                        for, every producer/form/source@version that gave it

The differential test (tests/integration/producers.rs) reads MANIFEST.tsv.

With --add, DEST is kept and STAGE's documents are added to it (tests/producers/regenerate
--add: new option sets only): every existing file keeps its bytes and its MANIFEST.tsv line, the
new files get theirs, named as a full run names them. It refuses (and writes nothing) when a new
document would replace an existing file with other bytes, or is byte for byte an existing file
(a full run would list both under one name): those need the full regeneration.

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
    argv = sys.argv[1:]
    add = argv[:1] == ["--add"]
    if add:
        argv = argv[1:]
    if len(argv) != 2:
        print("usage: collect.py [--add] STAGE DEST", file=sys.stderr)
        return 2
    stage, dest = Path(argv[0]), Path(argv[1])
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

    header = ("# file\tlibvirt versions it was made for\tproducer/form/source@version of every "
              "identical document\n")
    kept = {}
    if add:
        # The rows of DEST as they are, by file; the digest of every file they name.
        for line in (dest / "MANIFEST.tsv").read_text().splitlines():
            if line and not line.startswith("#"):
                kept[line.split("\t", 1)[0]] = line
        existing = {hashlib.sha256((dest / f).read_bytes()).hexdigest(): f for f in kept}
        clash = [f"{existing[d]} (a document of {origins[d][0][2]})"
                 for d in origins if d in existing]
        if clash:
            print("collect.py --add: identical to an existing file, regenerate in full: "
                  + ", ".join(clash), file=sys.stderr)
            return 1
    elif dest.exists():
        shutil.rmtree(dest)
    rows, written, files = [], set(), {}
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
        files[rel] = texts[digest]
        made = ",".join(f"{p}/{f}/{s}@{v}" for p, f, s, v in
                        sorted(orig, key=lambda o: (o[:3], version_key(o[3]))))
        rows.append(f"{rel}\t{','.join(versions)}\t{made}")
    taken = [str(rel) for rel in files if str(rel) in kept or (dest / rel).exists()]
    if taken:
        print("collect.py --add: these files exist already, regenerate in full: "
              + ", ".join(sorted(taken)), file=sys.stderr)
        return 1
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    rows = sorted(rows + list(kept.values()))
    (dest / "MANIFEST.tsv").write_text(header + "\n".join(rows) + "\n")
    total = sum(len(o) for o in origins.values())
    print(f"collect.py: {total} documents, {len(rows)} distinct, in {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
