# crates/cli/benches/corpus/fetch_lib.sh: the download, unpack and collect steps the corpus fetch scripts
# share. Sourced, not run. Every step is cached under CACHE and skipped when already done.

# out_dir SCRIPT [OUT_DIR]: sets OUT (created, made absolute) and CACHE (OUT/cache; each step
# makes the folder it uses), or stops with SCRIPT's usage.
out_dir() {
  if [ -z "${2:-}" ]; then
    echo "usage: $1 OUT_DIR" >&2
    exit 2
  fi
  OUT=$2
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  CACHE=$OUT/cache
}

# fetch_pypi CACHE SPEC...: source distributions ("name==version") into CACHE/pypi.
fetch_pypi() {
  local cache=$1 spec name ver; shift
  mkdir -p "$cache/pypi"
  for spec in "$@"; do
    name=${spec%%==*}; ver=${spec##*==}
    # sdist names vary in case and '-'/'_'; look for any cached archive of that version
    if ! ls "$cache/pypi" 2>/dev/null | grep -qiE "^${name//[-_.]/[-_.]}-${ver}\.(tar\.gz|zip)$"; then
      pip download --quiet --no-deps --no-binary :all: -d "$cache/pypi" "$spec"
    fi
  done
}

# fetch_npm CACHE SPEC...: package tarballs ("name@version") into CACHE/npm.
fetch_npm() {
  local cache=$1 spec name ver; shift
  mkdir -p "$cache/npm"
  for spec in "$@"; do
    name=${spec%@*}; ver=${spec##*@}
    if [ ! -f "$cache/npm/${name//\//-}-${ver}.tgz" ]; then
      (cd "$cache/npm" && npm pack --quiet "$spec" >/dev/null)
    fi
  done
}

# fetch_deb CACHE SPEC...: Debian packages ("name=version") into CACHE/deb.
fetch_deb() {
  local cache=$1 spec name; shift
  mkdir -p "$cache/deb"
  for spec in "$@"; do
    name=${spec%%=*}
    if ! ls "$cache/deb/${name}"_*.deb >/dev/null 2>&1; then
      (cd "$cache/deb" && apt-get download -q "$spec")
    fi
  done
}

# unpack_all CACHE: every cached archive into CACHE/unpacked/<archive name>/, once.
unpack_all() {
  local cache=$1 f d
  mkdir -p "$cache/unpacked"
  for f in "$cache"/pypi/*.tar.gz "$cache"/npm/*.tgz; do
    [ -e "$f" ] || continue
    d="$cache/unpacked/$(basename "$f")"
    [ -d "$d" ] || { mkdir -p "$d.tmp" && tar -xzf "$f" -C "$d.tmp" && mv "$d.tmp" "$d"; }
  done
  for f in "$cache"/pypi/*.zip; do
    [ -e "$f" ] || continue
    d="$cache/unpacked/$(basename "$f")"
    [ -d "$d" ] || { mkdir -p "$d.tmp" && python3 -m zipfile -e "$f" "$d.tmp" && mv "$d.tmp" "$d"; }
  done
  for f in "$cache"/deb/*.deb; do
    [ -e "$f" ] || continue
    d="$cache/unpacked/$(basename "$f")"
    [ -d "$d" ] || { mkdir -p "$d.tmp" && dpkg-deb -x "$f" "$d.tmp" && mv "$d.tmp" "$d"; }
  done
}

# collect CACHE EXT DEST MANIFEST: every unpacked *.EXT (any case), one copy per distinct
# sha256, as DEST/<sha256 prefix>__<source archive>__<name>.EXT; a manifest line each
# (sha256, source archive, path inside it, bytes).
collect() {
  local cache=$1 ext=$2 dest=$3 manifest=$4 file rel src inner sum base srcshort
  rm -rf "$dest"
  mkdir -p "$dest"
  printf 'sha256\tsource\tpath\tbytes\n' > "$manifest"
  declare -A seen=()
  while IFS= read -r -d '' file; do
    rel=${file#"$cache/unpacked/"}
    src=${rel%%/*}                       # archive name = source package + version
    inner=${rel#*/}
    sum=$(sha256sum "$file" | cut -d' ' -f1)
    [ -n "${seen[$sum]:-}" ] && continue
    seen[$sum]=1
    base=$(printf '%s' "$(basename "$inner")" | tr -c 'A-Za-z0-9._-' '_')
    base=${base%."$ext"}; base=${base%."${ext^^}"}
    srcshort=$(printf '%s' "$src" | sed -E 's/(\.tar\.gz|\.tgz|\.zip|_all\.deb)$//; s/[^A-Za-z0-9._-]/_/g')
    cp "$file" "$dest/${sum:0:12}__${srcshort}__${base}.$ext"
    printf '%s\t%s\t%s\t%s\n' "$sum" "$src" "$inner" "$(stat -c %s "$file")" >> "$manifest"
  done < <(find "$cache/unpacked" -type f -iname "*.$ext" -print0 | sort -z)
}
