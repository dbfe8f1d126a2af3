#!/usr/bin/env bash
# crates/cli/benches/corpus/build_corpus.sh [OUT_DIR]
#
# Builds the mixed real corpus `cargo bench --bench corpus` indexes: HTML, Markdown and
# plain text installed on this machine, plus public PDFs (fetch_pdfs.sh) and DOCX
# (fetch_docx.sh) from pinned packages' test suites. OUT_DIR defaults to
# $LEASEHOLD_BENCH_CORPUS, else target/bench-corpus; keep it outside the repository
# (target/ is ignored). Nothing here is committed.
#
# Output:
#   OUT_DIR/docs/{html,markdown,text,pdf,docx}/NNNN__<name>.<ext>   the folder to index
#   OUT_DIR/manifest.tsv   format, sha256, bytes, origin (the file it was copied from)
#   OUT_DIR/pdf-src, OUT_DIR/docx-src   the fetch scripts' caches (kept; reruns skip downloads)
#
# The local formats are chosen deterministically: every regular file with the format's
# extension below the roots listed in local_roots (those that exist), between 64 bytes
# and 2 MiB, deduplicated by content, sorted by path; each root contributes an evenly
# spaced share of its sorted list, the shares summing to the cap (a root with fewer
# files gives its rest to the others). Two runs on the same machine build the same
# corpus; the manifest says what it was. PDFs and DOCX are an evenly spaced share of
# the fetched files, sorted by name (sha256 prefix). Caps (the defaults give about the
# 1,620-file mix of issue 13's first measurement): HTML_N=500 MD_N=500 TXT_N=430
# PDF_N=72 DOCX_N=48; a local root with more than its share is sampled, never read whole.
#
# Requirements: python3, and what fetch_pdfs.sh / fetch_docx.sh need (pip, npm,
# apt-get download after `apt-get update`, dpkg-deb). To compare with Recoll, install
# it too: `apt-get install -y recoll poppler-utils` (the bench itself installs nothing).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
OUT=${1:-${LEASEHOLD_BENCH_CORPUS:-${CARGO_TARGET_DIR:-$REPO/target}/bench-corpus}}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
case "$OUT/" in
  "$REPO"/target/*) ;;
  "$REPO"/*) echo "refusing to build the corpus inside the repository: $OUT" >&2; exit 2 ;;
esac

"$HERE/fetch_pdfs.sh" "$OUT/pdf-src"
"$HERE/fetch_docx.sh" "$OUT/docx-src"

SYSROOT=$(rustc --print sysroot 2>/dev/null || true)
PYLIB=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
CARGO_SRC=${CARGO_HOME:-$HOME/.cargo}/registry/src

python3 - "$OUT" "$SYSROOT" "$PYLIB" "$CARGO_SRC" <<'PY'
import hashlib, os, shutil, sys

out, sysroot, pylib, cargo_src = sys.argv[1:5]
caps = {
    "html": int(os.environ.get("HTML_N", 500)),
    "markdown": int(os.environ.get("MD_N", 500)),
    "text": int(os.environ.get("TXT_N", 430)),
    "pdf": int(os.environ.get("PDF_N", 72)),
    "docx": int(os.environ.get("DOCX_N", 48)),
}
exts = {"html": (".html", ".htm"), "markdown": (".md",), "text": (".txt",)}
out_ext = {"html": ".html", "markdown": ".md", "text": ".txt"}
local_roots = [
    "/usr/share/doc",
    "/usr/share/gtk-doc",
    "/usr/lib/node_modules",
    "/usr/lib/python3/dist-packages",
    os.path.join(sysroot, "share/doc") if sysroot else "",
    pylib,
    cargo_src,
]
roots = sorted({os.path.realpath(r) for r in local_roots if r and os.path.isdir(r)})
MIN, MAX = 64, 2 * 1024 * 1024

def candidates(root, fmt):
    found = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        if os.path.realpath(d).startswith(out):
            dirs[:] = []
            continue
        for f in sorted(files):
            if f.lower().endswith(exts[fmt]):
                p = os.path.join(d, f)
                if os.path.isfile(p) and not os.path.islink(p) and MIN <= os.path.getsize(p) <= MAX:
                    found.append(p)
    return found

def spaced_indices(total, n):
    if n >= total:
        return list(range(total))
    return [(i * total) // n for i in range(n)]

docs = os.path.join(out, "docs")
shutil.rmtree(docs, ignore_errors=True)
rows = []
seen = set()
for fmt in ("html", "markdown", "text"):
    per_root = [candidates(r, fmt) for r in roots]
    # Shares: split the cap evenly; a root short of its share passes the rest on.
    want = caps[fmt]
    shares = [0] * len(roots)
    open_roots = [i for i in range(len(roots)) if per_root[i]]
    while want > 0 and open_roots:
        each = max(1, want // len(open_roots))
        for i in list(open_roots):
            take = min(each, len(per_root[i]) - shares[i], want)
            shares[i] += take
            want -= take
            if shares[i] == len(per_root[i]):
                open_roots.remove(i)
            if want == 0:
                break
    chosen = []
    for i, items in enumerate(per_root):
        used = set()
        for k in spaced_indices(len(items), shares[i]):
            # A duplicate (a licence text, say) gives way to the next file in the list.
            while k < len(items):
                if k not in used:
                    used.add(k)
                    data = open(items[k], "rb").read()
                    sha = hashlib.sha256(data).hexdigest()
                    if sha not in seen:
                        seen.add(sha)
                        chosen.append((items[k], sha, len(data)))
                        break
                k += 1
    os.makedirs(os.path.join(docs, fmt))
    for n, (p, sha, size) in enumerate(chosen):
        stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(p))
        stem = os.path.splitext(stem)[0][:60]
        shutil.copyfile(p, os.path.join(docs, fmt, f"{n:04}__{stem}{out_ext[fmt]}"))
        rows.append((fmt, sha, size, p))

for fmt, src, ext in (("pdf", "pdf-src/pdfs", ".pdf"), ("docx", "docx-src/docx", ".docx")):
    os.makedirs(os.path.join(docs, fmt))
    names = sorted(os.listdir(os.path.join(out, src)))
    for n, k in enumerate(spaced_indices(len(names), caps[fmt])):
        name = names[k]
        p = os.path.join(out, src, name)
        data = open(p, "rb").read()
        sha = hashlib.sha256(data).hexdigest()
        if sha in seen:
            continue
        seen.add(sha)
        shutil.copyfile(p, os.path.join(docs, fmt, f"{n:04}__{name[:80]}"))
        rows.append((fmt, sha, len(data), f"{src}/{name}"))

with open(os.path.join(out, "manifest.tsv"), "w") as man:
    man.write("format\tsha256\tbytes\torigin\n")
    for r in rows:
        man.write("\t".join(map(str, r)) + "\n")
by = {}
for fmt, _, size, _ in rows:
    c, b = by.get(fmt, (0, 0))
    by[fmt] = (c + 1, b + size)
total = sum(b for _, b in by.values())
print("corpus: %d files, %.1f MB in %s" % (len(rows), total / 1e6, docs))
for fmt, (c, b) in sorted(by.items()):
    print("  %-9s %5d files %8.1f MB" % (fmt, c, b / 1e6))
PY
