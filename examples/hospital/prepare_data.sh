#!/usr/bin/env bash
# Splits the Wisconsin diagnostic breast-cancer records (569 patients, 30 numeric features from
# digitised biopsy images; Debian ships them in python3-sklearn) across three hospitals.
#
# Out: <out>/hospital-{a,b,c}.csv with a header row, the 30 features standardised by each
# hospital with its own mean and deviation (no hospital sees another's statistics), and the label
# column "malignant" (1: malignant, 0: benign). Patient i goes to hospital i mod 3.
set -euo pipefail
out="${1:-examples/hospital/data}"
src=/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv
if [ ! -r "$src" ]; then
  # Only the data file is needed: unpack the package instead of installing it and its 100 MB of
  # dependencies. `apt-get download` fetches the Debian package, nothing else.
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/fl-examples"
  mkdir -p "$cache"
  if ! ls "$cache"/python3-sklearn_*.deb >/dev/null 2>&1; then
    (cd "$cache" && apt-get -o APT::Sandbox::User=root download python3-sklearn >/dev/null)
  fi
  rm -rf "$cache/root" && mkdir -p "$cache/root"
  dpkg -x "$cache"/python3-sklearn_*.deb "$cache/root"
  src="$cache/root$src"
fi
mkdir -p "$out"
names="radius texture perimeter area smoothness compactness concavity concave_points symmetry"
names="$names fractal_dimension"
header=""
for stat in mean se worst; do
  for n in $names; do header="$header${n}_$stat,"; done
done
header="${header}malignant"
for site in 0 1 2; do
  letter=$(printf "\\x$(printf %x $((97 + site)))")
  # Pass 1 takes the hospital's mean and deviation per column; pass 2 writes standardised rows.
  awk -F, -v site="$site" -v header="$header" '
    NR == 1 { next }
    (NR - 2) % 3 != site { next }
    { rows[++n] = $0; for (j = 1; j <= 30; ++j) { s[j] += $j; q[j] += $j * $j } }
    END {
      print header
      for (j = 1; j <= 30; ++j) {
        m[j] = s[j] / n; v = q[j] / n - m[j] * m[j]; d[j] = v > 0 ? sqrt(v) : 1
      }
      for (i = 1; i <= n; ++i) {
        split(rows[i], f, ",")
        line = ""
        for (j = 1; j <= 30; ++j) line = line sprintf("%.6f,", (f[j] - m[j]) / d[j])
        print line (f[31] == 0 ? 1 : 0)  # scikit-learn: target 0 is malignant
      }
    }' "$src" > "$out/hospital-$letter.csv"
done
wc -l "$out"/hospital-*.csv
