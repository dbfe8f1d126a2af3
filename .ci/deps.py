#!/usr/bin/env python3
"""The dependency policy (.ci/deps.toml) and the honesty of `rust-version`.

Reads `cargo metadata` for the locked set and fails when:
- a crate compiled by a library or binary of the workspace needs a newer Rust
  than the workspace's `rust-version` claims;
- a crate's licence is not on the list, it comes from elsewhere than
  crates.io, or it is banned;
- more crate names than allowed are compiled in two or more versions.
Development-only crates (criterion, proptest, ...) are checked for licence and
source but not counted as duplicates or against rust-version.
"""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
HOST = re.search(r"^host: (\S+)", HOST, re.M).group(1)


def version_tuple(v):
    return tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])


def licence_ok(expr, allowed):
    if not expr:
        return False
    expr = expr.replace("(", " ").replace(")", " ").replace("/", " OR ")
    for alternative in re.split(r"\s+OR\s+", expr):
        parts = [p.strip() for p in re.split(r"\s+AND\s+", alternative)]
        if all(p in allowed for p in parts):
            return True
    return False


def main():
    policy = tomllib.loads((ROOT / ".ci/deps.toml").read_text())
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", HOST],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    claimed = None
    for m in members:
        rv = packages[m].get("rust_version")
        if rv:
            claimed = max(claimed or (0, 0, 0), version_tuple(rv))
    problems = []

    # What the libraries and the binary compile: normal and build edges only.
    shipped, todo = set(), list(members)
    while todo:
        pid = todo.pop()
        if pid in shipped:
            continue
        shipped.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] != "dev" for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])

    newest = (None, (0, 0, 0))
    for pid in shipped - members:
        p = packages[pid]
        rv = p.get("rust_version")
        if rv and version_tuple(rv) > newest[1]:
            newest = (f"{p['name']} {p['version']}", version_tuple(rv))
        if rv and claimed and version_tuple(rv) > claimed:
            problems.append(f"{p['name']} {p['version']} needs Rust {rv}, the workspace claims "
                            f"{'.'.join(map(str, claimed))}")

    for pid in set(nodes) - members:
        p = packages[pid]
        if p["name"] in policy["banned"]:
            problems.append(f"{p['name']} {p['version']} is banned")
        if p["source"] not in policy["sources"]:
            problems.append(f"{p['name']} {p['version']} comes from {p['source']}")
        if not licence_ok(p.get("license"), set(policy["licenses"])):
            problems.append(f"{p['name']} {p['version']}: licence {p.get('license')!r} is not allowed")

    versions = {}
    for pid in shipped - members:
        p = packages[pid]
        versions.setdefault(p["name"], set()).add(p["version"])
    twice = sorted(f"{n} ({', '.join(sorted(v))})" for n, v in versions.items() if len(v) > 1)
    if len(twice) > policy["max_duplicates"]:
        problems.append(f"{len(twice)} crates in more than one version (at most "
                        f"{policy['max_duplicates']}): {'; '.join(twice)}")

    print(f"deps: {len(shipped - members)} crates compiled for the workspace's libraries and binary; "
          f"newest rust-version needed: {'.'.join(map(str, newest[1]))} ({newest[0]}); "
          f"claimed: {'.'.join(map(str, claimed)) if claimed else 'none'}; "
          f"in two versions: {len(twice)}{': ' + '; '.join(twice) if twice else ''}")
    if not claimed:
        problems.append("the workspace claims no rust-version")
    for line in problems:
        print(f"deps: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
