#!/usr/bin/env bash
# benches/corpus/fetch_docx.sh OUT_DIR
#
# Collects real, public DOCX files from the test suites of pinned packages, with the
# ordinary registry clients only (pip, npm), the way fetch_pdfs.sh does for PDFs.
# Idempotent: archives are cached under OUT_DIR/cache and not fetched again;
# OUT_DIR/docx is rebuilt from the cache each run.
#
# Output:
#   OUT_DIR/docx/<sha256-prefix>__<source>__<name>.docx   one file per distinct sha256
#   OUT_DIR/manifest.tsv   sha256, source package, path inside the package, bytes
#
# Sources:
#   python-docx 1.1.2 (PyPI sdist)  tests/ and features/: documents python-docx reads and writes
#   docx2python 2.10.1 (PyPI sdist) tests/resources: tables, lists, comments, odd producers
#   mammoth 1.8.0 (npm)             test/test-data: styles, notes, images, hyperlinks
#
# Requirements: pip, npm, tar, sha256sum.
set -euo pipefail

OUT=${1:?usage: fetch_docx.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CACHE=$OUT/cache
mkdir -p "$CACHE/pypi" "$CACHE/npm" "$CACHE/unpacked"

PYPI_SDISTS=(
  "python-docx==1.1.2"
  "docx2python==2.10.1"
)
NPM_PACKAGES=(
  "mammoth@1.8.0"
)

for spec in "${PYPI_SDISTS[@]}"; do
  name=${spec%%==*}; ver=${spec##*==}
  if ! ls "$CACHE/pypi" 2>/dev/null | grep -qiE "^${name//[-_.]/[-_.]}-${ver}\.(tar\.gz|zip)$"; then
    pip download --quiet --no-deps --no-binary :all: -d "$CACHE/pypi" "$spec"
  fi
done

for spec in "${NPM_PACKAGES[@]}"; do
  name=${spec%@*}; ver=${spec##*@}
  if [ ! -f "$CACHE/npm/${name//\//-}-${ver}.tgz" ]; then
    (cd "$CACHE/npm" && npm pack --quiet "$spec" >/dev/null)
  fi
done

for f in "$CACHE"/pypi/*.tar.gz "$CACHE"/npm/*.tgz; do
  [ -e "$f" ] || continue
  d="$CACHE/unpacked/$(basename "$f")"
  [ -d "$d" ] || { mkdir -p "$d.tmp" && tar -xzf "$f" -C "$d.tmp" && mv "$d.tmp" "$d"; }
done

rm -rf "$OUT/docx"
mkdir -p "$OUT/docx"
MANIFEST=$OUT/manifest.tsv
printf 'sha256\tsource\tpath\tbytes\n' > "$MANIFEST"
declare -A SEEN=()
while IFS= read -r -d '' file; do
  rel=${file#"$CACHE/unpacked/"}
  src=${rel%%/*}
  inner=${rel#*/}
  sum=$(sha256sum "$file" | cut -d' ' -f1)
  [ -n "${SEEN[$sum]:-}" ] && continue
  SEEN[$sum]=1
  base=$(printf '%s' "$(basename "$inner")" | tr -c 'A-Za-z0-9._-' '_')
  base=${base%.docx}; base=${base%.DOCX}
  srcshort=$(printf '%s' "$src" | sed -E 's/(\.tar\.gz|\.tgz)$//; s/[^A-Za-z0-9._-]/_/g')
  cp "$file" "$OUT/docx/${sum:0:12}__${srcshort}__${base}.docx"
  printf '%s\t%s\t%s\t%s\n' "$sum" "$src" "$inner" "$(stat -c %s "$file")" >> "$MANIFEST"
done < <(find "$CACHE/unpacked" -type f -iname '*.docx' -print0 | sort -z)

echo "docx: $(ls "$OUT/docx" | wc -l) distinct DOCX in $OUT/docx (manifest: $MANIFEST)"
