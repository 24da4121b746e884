#!/usr/bin/env bash
# data/download_mnist.sh — downloads the four MNIST files (gzip, as published) into data/mnist/ and checks them.
#
# usage: data/download_mnist.sh [DIR]        (default DIR: data/mnist next to this script; `make data` runs this)
#
# Each file is downloaded to a temporary name in DIR, its MD5 is checked against the published value, and only
# then is it renamed to its real name, so an interrupted or failed download never leaves a file that looks
# complete. Files already present with the right checksum are kept. Without network access the script says so,
# removes what it started, and exits with status 1.
#
# MNIST_MIRRORS (space-separated base URLs, each ending in /) overrides the mirrors, e.g. a local copy:
#   MNIST_MIRRORS="file:///srv/mnist/" data/download_mnist.sh
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
default_mirrors="https://ossci-datasets.s3.amazonaws.com/mnist/ https://storage.googleapis.com/cvdf-datasets/mnist/"
case "${1:-}" in
  -h | --help)
    cat << EOF
usage: $0 [DIR]
Downloads the four MNIST files (gzip, as published) into DIR (default: $script_dir/mnist) and checks each
one's MD5; files already there with the right checksum are kept. Exits 1 if a file could not be downloaded.
Environment:
  MNIST_MIRRORS  space-separated base URLs, each ending in /, tried in order (file:///DIR/ for a local copy);
                 default: $default_mirrors
EOF
    exit 0 ;;
  -*) echo "download_mnist.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
target="${1:-$script_dir/mnist}"
mirrors="${MNIST_MIRRORS:-$default_mirrors}"

# name and MD5 of the published .gz files
files=(
  "train-images-idx3-ubyte.gz f68b3c2dcbeaaa9fbdd348bbdeb94873"
  "train-labels-idx1-ubyte.gz d53e105ee54ea40749a09fcbcd1e9432"
  "t10k-images-idx3-ubyte.gz 9fb629c4189551a2d022fa330f9573f3"
  "t10k-labels-idx1-ubyte.gz ec29112dd5afa0611ce80d1b7f02629c"
)

if command -v curl > /dev/null; then
  fetch() { curl --fail --silent --show-error --location --connect-timeout 15 --max-time 600 --output "$2" "$1"; }
elif command -v wget > /dev/null; then
  fetch() { wget --quiet --timeout=15 --tries=2 --output-document="$2" "$1"; }
else
  echo "download_mnist.sh: neither curl nor wget is installed (apt-get install curl)" >&2
  exit 1
fi

md5_of() { md5sum "$1" | cut -d' ' -f1; }

mkdir -p "$target"
partial=""
# On any exit (an error, Ctrl-C, TERM): remove the file being downloaded and its error log.
cleanup() { if [[ -n "$partial" ]]; then rm -f "$partial" "$partial.log"; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=()
for entry in "${files[@]}"; do
  read -r name md5 <<< "$entry"
  if [[ -f "$target/$name" && "$(md5_of "$target/$name")" == "$md5" ]]; then
    echo "$name: already present, checksum OK"
    continue
  fi
  ok=0
  for mirror in $mirrors; do
    partial="$target/.$name.part.$$"
    echo "$name: downloading from $mirror"
    if ! fetch "$mirror$name" "$partial" 2> "$partial.log"; then
      echo "  failed: $(tail -n 1 "$partial.log")" >&2
      rm -f "$partial" "$partial.log"
      continue
    fi
    rm -f "$partial.log"
    got="$(md5_of "$partial")"
    if [[ "$got" != "$md5" ]]; then
      echo "  wrong checksum: got $got, expected $md5; discarded" >&2
      rm -f "$partial"
      continue
    fi
    mv -f "$partial" "$target/$name"
    partial=""
    echo "  checksum OK"
    ok=1
    break
  done
  partial=""
  if [[ $ok -eq 0 ]]; then failed+=("$name"); fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  cat >&2 << EOF
download_mnist.sh: could not download ${failed[*]} from any mirror ($mirrors); errors above.
If this machine is offline, other ways to get the data:
  * copy the four files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
    t10k-labels-idx1-ubyte.gz) into $target/, or point the programs at them with --data DIR or MNIST_DIR=DIR;
  * apt-get install dataset-fashion-mnist  (Fashion-MNIST, same format; found automatically).
EOF
  exit 1
fi
echo "MNIST is in $target"
