#!/usr/bin/env bash
# Download IWSLT'15 English-Vietnamese (the Stanford NMT release used by Luong & Manning 2015)
# and check every file against its reference sha256.
#
#   train/data/iwslt15.sh [DEST]     DEST defaults to $KT_DATA_DIR/iwslt15_en_vi, else
#                                    ../shared/data/iwslt15_en_vi
#
# IWSLT15_URL replaces the Stanford address: another mirror's URL, or a local folder holding
# the files (copied from a machine with network), which is copied from instead. A file already
# in DEST is not fetched again, only checked.
#
# Then train on the full set with
#   python -m train --config train/configs/iwslt15_envi_small.yaml --out runs/iwslt15_envi_small \
#     --set data.train_source=iwslt15_en_vi/train.en --set data.train_target=iwslt15_en_vi/train.vi
# The TED transcripts are CC BY-NC-ND: non-commercial use, attribute TED.
set -euo pipefail

BASE_URL="${IWSLT15_URL:-https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi}"
DEST="${1:-${KT_DATA_DIR:-../shared/data}/iwslt15_en_vi}"

# name  sha256 (tst2013 has no published reference checksum: it is downloaded unchecked)
FILES="
train.en c26dfeed74b6bf3752f5ca552f2412456f0de153f7c804df8717931fb3a5c78a
train.vi 707206edf2dc0280273952c7b70544ea8a1363aa69aaeb9d70514b888dc3067d
tst2012.en b8fbcd0d4199d41276421d1f7228298df67dd9e2c5c134c2ee8cdf3ec27801e2
tst2012.vi 01004078b3f36b0c46e81b65fc6851230b3c823405c76d1d82ef3b786b512ff0
tst2013.en -
tst2013.vi -
vocab.en 827ac2c6d51c50014376cefc1d7b6b01c412f227c4dfbc6dbcb0e88891c0b759
vocab.vi 383628b92b1dcbce472fa9857724add8b2976c2ed2bbe1d76ea8dca108c3396a
"

if command -v sha256sum >/dev/null; then SHA="sha256sum"; else SHA="shasum -a 256"; fi
if [ -d "$BASE_URL" ]; then FETCH="cp"; elif command -v curl >/dev/null; then
  FETCH="curl -fsSL --retry 3 -o"; else FETCH="wget -q -O"; fi

# fetch NAME TARGET: BASE_URL/NAME into TARGET through TARGET.part, so that an interrupted
# fetch leaves no partial file under the final name.
fetch() {
  if [ "$FETCH" = "cp" ]; then
    cp "$BASE_URL/$1" "$2.part" 2>/dev/null
  else
    $FETCH "$2.part" "$BASE_URL/$1" 2>/dev/null
  fi
}

created=""
[ -d "$DEST" ] || created=1
mkdir -p "$DEST"
failed=0
while read -r name expected; do
  [ -z "$name" ] && continue
  target="$DEST/$name"
  if [ ! -s "$target" ]; then
    echo "fetching $BASE_URL/$name"
    if ! fetch "$name" "$target"; then
      rm -f "$target.part"
      [ -z "$created" ] || rmdir "$DEST" 2>/dev/null || true  # only if still empty
      echo "could not fetch $BASE_URL/$name: without network, set IWSLT15_URL to a folder" \
           "holding the files" >&2
      exit 1
    fi
    mv "$target.part" "$target"
  fi
  if [ "$expected" = "-" ]; then
    echo "$name: no reference checksum"
    continue
  fi
  actual="$($SHA "$target" | cut -d' ' -f1)"
  if [ "$actual" = "$expected" ]; then
    echo "$name: sha256 ok"
  else
    echo "$name: sha256 MISMATCH (got $actual, expected $expected)" >&2
    failed=1
  fi
done <<< "$FILES"

if [ "$failed" -ne 0 ]; then
  echo "some files do not match their checksums; delete them and run again" >&2
  exit 1
fi
echo "IWSLT'15 en-vi is in $DEST"
