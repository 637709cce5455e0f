#!/usr/bin/env python3
"""The layering check (ctest `layering`): no source file includes a header of a layer above its own.

Layers, bottom to top (docs/design/0022-layers-and-resolved-plan.md):
  0 base     runtime/{common,config,comm,launch,diag,estimate,worker,checkpoint,tracking,report}
  1 engine   engine/ (with sharded/, replicated/, fsdp/, optim/, format/)
  2 API      include/accel/, api/
  3 trainer  trainer/ (with models/, data/)
  4 cli      cli/
A file may include its own layer and the layers below. Every C++ source under these folders must
map to a layer (a new folder is added to LAYERS on purpose, not by accident).

Exceptions would be listed in layering_allowlist.txt beside this file as `file -> included header`;
the list is empty. The check fails on an upward include not in the list and on a listed one that no
longer exists, so the list only shrinks.

  check_layers.py [--root DIR] [--print]     # --print: every upward include, in the list's format
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

LAYERS = [  # (path prefix, layer, name); the longest matching prefix wins
    ("runtime/common/", 0, "base"), ("runtime/config/", 0, "base"), ("runtime/comm/", 0, "base"),
    ("runtime/launch/", 0, "base"), ("runtime/diag/", 0, "base"), ("runtime/estimate/", 0, "base"),
    ("runtime/worker/", 0, "base"), ("runtime/checkpoint/", 0, "base"), ("runtime/tracking/", 0, "base"),
    ("runtime/report/", 0, "base"), ("runtime/hf/", 0, "base"),
    ("engine/", 1, "engine"),
    ("include/accel/", 2, "API"), ("api/", 2, "API"),
    ("trainer/", 3, "trainer"),
    ("cli/", 4, "cli"),
]
CHECKED = ("runtime/", "engine/", "api/", "include/", "trainer/", "cli/")
SOURCE = re.compile(r"\.(cpp|hpp|h|cc)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
ALLOWLIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layering_allowlist.txt")


def layer_of(path):
    best = None
    for prefix, level, name in LAYERS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, level, name)
    return best


def header_path(include):
    """The repository path of an included project header, or None for a system or torch header."""
    if include.startswith("accel/"):
        return "include/" + include  # the public headers, as installed
    if include.startswith(CHECKED):
        return include
    return None


def upward_includes(root):
    files = subprocess.run(["git", "-C", root, "ls-files"], stdout=subprocess.PIPE, text=True,
                           check=True).stdout.split()
    sources = [f for f in files if f.startswith(CHECKED) and SOURCE.search(f)]
    unmapped = sorted(f for f in sources if layer_of(f) is None)
    found = []
    for f in sources:
        mine = layer_of(f)
        if mine is None:
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            target = header_path(inc)
            theirs = layer_of(target) if target else None
            if theirs and theirs[1] > mine[1]:
                found.append((f, target, mine[2], theirs[2]))
    return unmapped, found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args(argv)
    unmapped, found = upward_includes(a.root)
    lines = sorted({f"{f} -> {t}" for f, t, _, _ in found})
    if a.print:
        print("\n".join(lines))
        return 0
    with open(ALLOWLIST) as fh:
        allowed = {ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")}
    new = [(f, t, m, th) for f, t, m, th in found if f"{f} -> {t}" not in allowed]
    stale = sorted(allowed - set(lines))
    for f in unmapped:
        print(f"layering: {f} is in no layer: add its folder to LAYERS in {os.path.basename(__file__)}")
    for f, t, m, th in new:
        print(f"layering: {f} ({m}) includes {t} ({th}), a layer above it: move the code down or depend "
              f"the other way")
    for s in stale:
        print(f"layering: '{s}' is allowed in layering_allowlist.txt but no longer happens: delete the line")
    ok = not (unmapped or new or stale)
    print(f"layering: {len(found)} upward includes, all {len(allowed)} known exceptions" if ok else
          f"layering: {len(unmapped)} unmapped files, {len(new)} new upward includes, {len(stale)} stale exceptions")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
