"""Turns the promtool test templates of monitoring/tests/ into promtool test files whose input
series are textfiles the tool really wrote (tests/monitoring/run).

  expand.py TEMPLATE SNAPSHOT_DIR RULES_DIR OUT

A template is a promtool test file (`promtool test rules`) in which an entry of `input_series`
may be, instead of `series`/`values`:

    - textfiles: [attention@now x4, fixed@now x4]
      labels: {instance: kvm-a, job: node}

Each word is one scrape per `interval` of the test: SNAPSHOT_DIR/NAME.prom (a Prometheus text
file: `audit --format prometheus`, or a daemon's --metrics-file), `-` for no file at that step,
`xN` repeating it N times. `@now` sets virt_cpu_policy_last_reconcile_timestamp_seconds to the
time of the scrape (the figures are fresh), `@T` to T seconds (they stopped at T); without `@`
the file's own value stays. Every series of every file becomes an input series with the given
labels added (as Prometheus adds `instance` and `job` at scrape), `_` where a file lacks it.

An alert's `exp_annotations` may leave out `description`: it is then the rule's own description
with `{{ $labels.NAME }}` filled from the expected labels (the description is fixed text; the
summary, which carries the figures, is always written out in the template).

Exit 2 with one line on stderr for a template that cannot be expanded.
"""

import os
import re
import sys

import yaml

TIMESTAMP = "virt_cpu_policy_last_reconcile_timestamp_seconds"


def parse_prom(path):
    """series text -> value, in file order, for a Prometheus text file."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            out[series] = value
    return out


def with_labels(series, labels):
    extra = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    if series.endswith("}"):
        return series[:-1] + "," + extra + "}"
    return series + "{" + extra + "}"


def steps(words, interval_s):
    out = []
    for w in words:
        m = re.fullmatch(r"(\S+?)(?:@(now|\d+))?(?: x(\d+))?", w.strip())
        if not m:
            sys.exit(f"expand.py: cannot read the step `{w}`")
        name, at, times = m.group(1), m.group(2), int(m.group(3) or 1)
        for _ in range(times):
            out.append((name, at, len(out) * interval_s))
    return out


def seconds(d):
    total = 0
    for n, unit in re.findall(r"(\d+)([smhd])", d):
        total += int(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return total


def expand_series(entry, snap_dir, interval_s):
    plan = steps(entry["textfiles"], interval_s)
    files = {}
    for name, _, _ in plan:
        if name != "-" and name not in files:
            files[name] = parse_prom(os.path.join(snap_dir, name + ".prom"))
    keys = []
    for name, _, _ in plan:
        for k in files.get(name, {}):
            if k not in keys:
                keys.append(k)
    out = []
    for k in keys:
        values = []
        for name, at, t in plan:
            v = files.get(name, {}).get(k) if name != "-" else None
            if v is not None and k == TIMESTAMP and at is not None:
                v = str(t) if at == "now" else at
            values.append("_" if v is None else v)
        out.append({"series": with_labels(k, entry.get("labels", {})), "values": " ".join(values)})
    return out


def rule_descriptions(rules_dir):
    out = {}
    for f in sorted(os.listdir(rules_dir)):
        if f.endswith(".yml"):
            with open(os.path.join(rules_dir, f)) as fh:
                for g in yaml.safe_load(fh).get("groups", []):
                    for r in g["rules"]:
                        if "alert" in r:
                            out[r["alert"]] = r.get("annotations", {}).get("description")
    return out


def main():
    template, snap_dir, rules_dir, out_path = sys.argv[1:5]
    with open(template) as f:
        doc = yaml.safe_load(f)
    descriptions = rule_descriptions(rules_dir)
    for test in doc["tests"]:
        interval_s = seconds(test.get("interval", doc.get("evaluation_interval", "1m")))
        series = []
        for entry in test["input_series"]:
            series += expand_series(entry, snap_dir, interval_s) if "textfiles" in entry else [entry]
        test["input_series"] = series
        for art in test.get("alert_rule_test", []):
            for exp in art.get("exp_alerts", []) or []:
                ann = exp.setdefault("exp_annotations", {})
                if "description" not in ann and descriptions.get(art["alertname"]):
                    labels = exp.get("exp_labels", {})
                    ann["description"] = re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                                lambda m: str(labels.get(m.group(1), "")),
                                                descriptions[art["alertname"]])
    # Rule files are named relative to the test file: point them at RULES_DIR.
    doc["rule_files"] = [os.path.join(os.path.abspath(rules_dir), os.path.basename(r))
                         for r in doc["rule_files"]]
    with open(out_path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=1000)


if __name__ == "__main__":
    main()
