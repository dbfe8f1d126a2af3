#!/usr/bin/env bash
# crates/cli/benches/corpus/fetch_docx.sh OUT_DIR
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
# shellcheck source=fetch_lib.sh
. "$(dirname "$0")/fetch_lib.sh"

out_dir fetch_docx.sh "${1:-}"

PYPI_SDISTS=(
  "python-docx==1.1.2"
  "docx2python==2.10.1"
)
NPM_PACKAGES=(
  "mammoth@1.8.0"
)

fetch_pypi "$CACHE" "${PYPI_SDISTS[@]}"
fetch_npm "$CACHE" "${NPM_PACKAGES[@]}"
unpack_all "$CACHE"
MANIFEST=$OUT/manifest.tsv
collect "$CACHE" docx "$OUT/docx" "$MANIFEST"

echo "docx: $(ls "$OUT/docx" | wc -l) distinct DOCX in $OUT/docx (manifest: $MANIFEST)"
