#!/bin/sh
# Downloads the portal's runtime wheels (bench/requirements-gpu.txt, every dependency pinned by
# requirements.txt) for CPython 3.12 on x86-64 Linux into bench/wheels-py312/ (ignored by git),
# then checks that they install on an empty Python 3.12 with no index, as on a GPU machine with no
# network. Not torch, numpy or scikit-learn: that machine has its own. See README, "GPU check".
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEST=bench/wheels-py312
TARGET="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
mkdir -p "$DEST"
printf '*\n' >"$DEST/.gitignore"  # wheels are never committed; the device tool carries the folder
rm -f "$DEST"/*.whl               # one version of each: two would stop the install there
# shellcheck disable=SC2086  # TARGET is a list of options
"$PY" -m pip download -q $TARGET -r bench/requirements-gpu.txt -c requirements.txt -d "$DEST"
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
# shellcheck disable=SC2086
"$PY" -m pip install -q --dry-run --ignore-installed --no-index --find-links "$DEST" $TARGET --target "$check" \
    -r bench/requirements-gpu.txt
echo "$(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST; they install on Python 3.12 without an index"
