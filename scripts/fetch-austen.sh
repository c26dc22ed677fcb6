#!/usr/bin/env bash
# Installs the Jane Austen corpus (the R data file of Debian's r-cran-janeaustenr package) where
# nms::austen_default_path() looks for it:
#   $NMSPARSE_AUSTEN if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/nmsparse/janeaustenr/Rdata.rdb
# Only that one file is installed: the package itself is not (it would pull in R). The .deb is
# fetched with `apt-get download` into a temporary directory and unpacked with `dpkg-deb -x`; the
# file is copied next to its destination and renamed over it, so readers never see half a file.
# Idempotent and silent when the file is already there. Needs no root (unless the apt package
# lists are missing, when it runs `apt-get update`, through sudo when not root).
#   scripts/fetch-austen.sh
set -euo pipefail

if [[ -n "${NMSPARSE_AUSTEN:-}" ]]; then
  dest=$NMSPARSE_AUSTEN
else
  cache=${XDG_CACHE_HOME:-}
  if [[ -z "$cache" ]]; then
    cache="${HOME:?fetch-austen: neither NMSPARSE_AUSTEN, XDG_CACHE_HOME nor HOME is set}/.cache"
  fi
  dest="$cache/nmsparse/janeaustenr/Rdata.rdb"
fi
if [[ -s "$dest" ]]; then
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "fetch-austen: $tool not found (Debian only)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log="$tmp/log"
# As root, apt-get download warns that it runs unsandboxed (user _apt cannot write to the private
# temporary directory); that is harmless, so its output is only shown when it fails.
download() { (cd "$tmp" && apt-get download r-cran-janeaustenr) >"$log" 2>&1; }
if ! download; then
  # Usually: no package lists yet on a fresh machine.
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq >>"$log" 2>&1 || true
  if ! download; then
    cat "$log" >&2
    echo "fetch-austen: apt-get download r-cran-janeaustenr failed" >&2
    exit 1
  fi
fi
debs=("$tmp"/r-cran-janeaustenr_*.deb)
dpkg-deb -x "${debs[0]}" "$tmp/x"
src="$tmp/x/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
if [[ ! -s "$src" ]]; then
  echo "fetch-austen: ${debs[0]##*/} holds no usr/lib/R/site-library/janeaustenr/data/Rdata.rdb" >&2
  exit 1
fi

mkdir -p "$(dirname "$dest")"
partial="$dest.tmp.$$"
trap 'rm -rf "$tmp"; rm -f "$partial"' EXIT
cp "$src" "$partial"
mv -f "$partial" "$dest"
echo "fetch-austen: installed $dest ($(stat -c %s "$dest") bytes, from ${debs[0]##*/})" >&2
