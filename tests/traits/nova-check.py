"""Nova's own loader as the oracle of `virt-cpu-policy traits --format nova` (run by tests/traits/run).

For every golden case under tests/baseline-cases/ whose command is `traits` with the Nova format
and exit 0, the document is made afresh by the tool, written as the only file of a
provider_config_location directory, and loaded with nova.compute.provider_config
.get_provider_configs, which is what nova-compute's resource tracker calls at start: the schema
(version 1.0), the custom-trait check (os_traits.is_custom) and the duplicate check all run.
Each provider Nova returns must carry exactly the traits the tool meant for that host:

* CUSTOM_X86_64_V2 ... up to the host's own level, the level taken from `baseline --migratable
  --format json` on the same facts (the per-host level `baseline` reports);
* the cluster trait CUSTOM_VCP_CLUSTER_<MODEL>_<FP>, rebuilt here from the JSON of `traits`:
  <MODEL> from baseline's model, <FP> the SHA-256 of ARCH\\nMODEL\\nVENDOR\\nFEATURES\\n.

Then the oracle is shown to bite: documents Nova must refuse (a trait that is not custom, a
lower-case one, schema version 2.0, a provider name of 201 characters) each raise
ProviderConfigException.

Arguments: BIN CASES_DIR CORPUS CPU_MAP WORK. Prints `ok`/`FAIL` lines and a summary; exit 1 on
any failure.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

from nova import exception as nova_exc
from nova.compute import provider_config

BIN, CASES, CORPUS, CPU_MAP, WORK = sys.argv[1:6]
FAILED = []
PASSED = 0


def check(what, cond, detail=""):
    global PASSED
    if cond:
        PASSED += 1
        print(f"ok   {what}")
    else:
        FAILED.append(what)
        print(f"FAIL {what}{': ' + detail if detail else ''}")


def run(args, cwd):
    p = subprocess.run([BIN] + args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def case_args(case_dir):
    with open(os.path.join(case_dir, "args")) as f:
        lines = [l.strip() for l in f if l.strip()]
    return [l.replace("{corpus}", CORPUS).replace("{cpu_map}", CPU_MAP) for l in lines]


def option_value(args, name):
    return args[args.index(name) + 1] if name in args else None


def facts_of(args):
    """The FACTS of a traits command line: what is left without the options and their values."""
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("--cpu-map", "--format", "--host"):
            skip = True
        else:
            out.append(a)
    return out


def load(doc, name):
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "provider.yaml"), "w") as f:
        f.write(doc)
    return provider_config.get_provider_configs(d)


def expected_traits(args, case_dir):
    """Host name -> the traits each host must carry, from baseline's levels and traits' JSON."""
    cpu_map = ["--cpu-map", option_value(args, "--cpu-map")] if "--cpu-map" in args else []
    facts = facts_of(args)
    base = json.loads(run(["baseline", "--migratable", "--format", "json"] + cpu_map + facts, case_dir))
    tr = json.loads(run(["traits", "--format", "json"] + cpu_map + facts, case_dir))
    c = tr["cluster"]
    canonical = f"{c['arch']}\n{c['model']}\n{c['vendor'] or ''}\n{' '.join(c['features'])}\n"
    fp = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    model = re.sub("[^A-Z0-9]", "_", base["model"].upper())
    cluster = f"CUSTOM_VCP_CLUSTER_{model}_{fp.upper()}"
    check(f"{os.path.basename(case_dir)}: cluster trait {cluster} from sha256 of the CPU",
          c["trait"] == cluster and c["model"] == base["model"] and c["vendor"] == base["vendor"],
          f"tool says {c['trait']} ({c['model']}, {c['vendor']})")
    want = {}
    for h in base["hosts"]:
        n = int(h["level"][-1]) if h["level"] else 0
        want[h["name"]] = {f"CUSTOM_X86_64_V{v}" for v in range(2, n + 1)} | {cluster}
    host = option_value(args, "--host")
    if host:
        want = {host: want[host]}
    return want


cases = sorted(d for d in os.listdir(CASES) if os.path.isfile(os.path.join(CASES, d, "args")))
tried = 0
for name in cases:
    case_dir = os.path.join(CASES, name)
    args = case_args(case_dir)
    if args[0] != "traits" or option_value(args, "--format") not in (None, "nova"):
        continue
    if os.path.exists(os.path.join(case_dir, "expected-exit")):
        continue
    tried += 1
    doc = run(args, case_dir)
    try:
        configs = load(doc, name)
    except nova_exc.ProviderConfigException as e:
        check(f"{name}: Nova loads the document", False, str(e))
        continue
    want = expected_traits(args, case_dir)
    got = {n: set(p.get("traits", {}).get("additional", [])) for n, p in configs.items()}
    check(f"{name}: Nova loads {len(configs)} provider(s), one per host, each identified by name",
          set(got) == set(want) and all("name" in p["identification"] for p in configs.values()),
          f"{sorted(got)} vs {sorted(want)}")
    for host, traits in sorted(want.items()):
        check(f"{name}: {host}: {', '.join(sorted(traits))}", got.get(host) == traits,
              f"Nova has {sorted(got.get(host, []))}")

check(f"{tried} golden traits case(s) in the Nova format loaded", tried >= 5)

# The oracle bites: what Nova must refuse.
good = run(["traits", "--cpu-map", CPU_MAP,
            os.path.join(CORPUS, "libvirt-cputestdata/x86_64-cpuid-Core-i7-3770-host.xml")], WORK)
bad = {
    "a trait that is not custom": good.replace("- CUSTOM_X86_64_V2", "- HW_CPU_X86_AVX2"),
    "a lower-case trait": good.replace("- CUSTOM_X86_64_V2", "- CUSTOM_x86_64_v2"),
    "schema version 2.0": good.replace("schema_version: '1.0'", "schema_version: '2.0'"),
    "a provider name of 201 characters": re.sub(r'name: ".*"', 'name: "' + "h" * 201 + '"', good),
}
for what, doc in bad.items():
    try:
        load(doc, "bad-" + re.sub("[^a-z0-9]", "-", what))
        check(f"Nova refuses {what}", False, "loaded without complaint")
    except nova_exc.ProviderConfigException as e:
        check(f"Nova refuses {what}", True)
        print(f"     ({str(e)[:150]})")

print(f"traits-nova: {PASSED} passed, {len(FAILED)} failed")
sys.exit(1 if FAILED else 0)
