#!/usr/bin/env bash
# crates/cli/benches/corpus/fetch_pdfs.sh OUT_DIR
#
# Builds a corpus of real, public PDFs for benchmarking PDF text extraction, using only the
# ordinary package-registry clients (pip, npm, apt-get/dpkg-deb). Every package version is
# pinned, so two runs produce the same files. Idempotent: downloads are cached under
# OUT_DIR/cache and skipped when present; OUT_DIR/pdfs is rebuilt from the cache each run.
#
# Output:
#   OUT_DIR/pdfs/<sha256-prefix>__<source>__<name>.pdf   one file per distinct sha256
#   OUT_DIR/manifest.tsv   sha256, source package, path inside the package, bytes
#
# Sources (why each is here):
#   pypdf 7.1.1 (PyPI sdist)       tests' resources: encrypted files (RC4/AES, empty user
#                                  password), broken/missing xref, odd encodings, forms
#   pdfminer 20191125 (PyPI sdist) samples/: CID/CJK fonts, vertical text, encrypted samples
#   PyPDF2 1.26.0 (PyPI sdist)     one sample document
#   pdf-parse 1.1.1 (npm)          test/data: small real-world documents
#   texlive-latex-recommended-doc, texlive-fonts-recommended-doc, texlive-metapost-doc
#   (Debian 12 packages)           real-world manuals (pdfTeX/LuaTeX/XeTeX output, Type1/OTF)
#   ghostscript-doc (Debian 12)    a Ghostscript-produced manual
#
# Requirements: pip, npm, apt-get (after `apt-get update`), dpkg-deb, tar, sha256sum.
set -euo pipefail
# shellcheck source=fetch_lib.sh
. "$(dirname "$0")/fetch_lib.sh"

out_dir fetch_pdfs.sh "${1:-}"

PYPI_SDISTS=(
  "pypdf==7.1.1"
  "pdfminer==20191125"
  "PyPDF2==1.26.0"
)
NPM_PACKAGES=(
  "pdf-parse@1.1.1"
)
DEBIAN_PACKAGES=(
  "texlive-latex-recommended-doc=2022.20230122-3"
  "texlive-fonts-recommended-doc=2022.20230122-3"
  "texlive-metapost-doc=2022.20230122-3"
  "ghostscript-doc=10.0.0~dfsg-11+deb12u9"
)

# --- download (skipped when the archive is already cached), unpack, collect --------------
fetch_pypi "$CACHE" "${PYPI_SDISTS[@]}"
fetch_npm "$CACHE" "${NPM_PACKAGES[@]}"
fetch_deb "$CACHE" "${DEBIAN_PACKAGES[@]}"
unpack_all "$CACHE"
MANIFEST=$OUT/manifest.tsv
collect "$CACHE" pdf "$OUT/pdfs" "$MANIFEST"

# --- damaged-xref variants ------------------------------------------------------------------
# The registries' packages hold only a couple of files with a broken cross-reference table,
# so we derive some deterministically: the first 8 unencrypted PDFs under 1.5 MB (by sha256)
# each get three kinds of damage that poppler repairs by scanning the file:
#   shift     - 64 bytes inserted after the header line: every xref offset is wrong
#   startxref - the startxref value points past the end of the file
#   noxref    - the file is cut just before its last `xref`/`startxref`: no table, no trailer
python3 - "$OUT" <<'PY'
import hashlib, os, re, sys
out = sys.argv[1]; pdfs = os.path.join(out, "pdfs")
rows = [l.split("\t") for l in open(os.path.join(out, "manifest.tsv")).read().splitlines()[1:]]
picked = []
for sha, src, path, size in sorted(rows):
    f = [n for n in os.listdir(pdfs) if n.startswith(sha[:12] + "__")][0]
    data = open(os.path.join(pdfs, f), "rb").read()
    if int(size) < 1_500_000 and b"/Encrypt" not in data and data.startswith(b"%PDF-") and b"startxref" in data:
        picked.append((f, data))
    if len(picked) == 8:
        break
def shift(d):
    i = d.index(b"\n") + 1
    return d[:i] + b"%" + b"x" * 62 + b"\n" + d[i:]
def startxref(d):
    i = d.rindex(b"startxref")
    return d[:i] + re.sub(rb"startxref\s+\d+", b"startxref\n99999999", d[i:], count=1)
def noxref(d):
    i = d.rfind(b"\nxref")
    return d[: i + 1 if i > 0 else d.rindex(b"startxref")]
with open(os.path.join(out, "manifest.tsv"), "a") as man:
    for f, data in picked:
        for kind, fn in (("shift", shift), ("startxref", startxref), ("noxref", noxref)):
            d = fn(data)
            sha = hashlib.sha256(d).hexdigest()
            name = f"{sha[:12]}__damaged-{kind}__{f.split('__', 2)[2]}"
            open(os.path.join(pdfs, name), "wb").write(d)
            man.write(f"{sha}\tdamaged-{kind}\tfrom {f}\t{len(d)}\n")
PY

echo "corpus: $(ls "$OUT/pdfs" | wc -l) distinct PDFs in $OUT/pdfs (manifest: $MANIFEST)"
