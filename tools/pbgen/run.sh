#!/usr/bin/env bash
# Regenerates libs/kpb/src/generated.rs from the k8s-openapi and k8s-pb sources cargo fetched.
set -euo pipefail
cd "$(dirname "$0")/../.."
meta=$(cargo metadata --format-version 1)
src_of() {
  python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(os.path.dirname(next(p["manifest_path"] for p in m["packages"] if p["name"]==sys.argv[1])))' "$1" <<<"$meta"
}
openapi=$(src_of k8s-openapi)/src/v1_33
pb=$(src_of k8s-pb)/src
CARGO_TARGET_DIR=${PBGEN_TARGET:-target} cargo run -q -p pbgen -- "$openapi" "$pb" libs/kpb/src/generated.rs 2> target/pbgen.log
rustfmt --edition 2024 libs/kpb/src/generated.rs 2>/dev/null || true
grep -c '^skipped' target/pbgen.log || true
echo "report: target/pbgen.log"
CARGO_TARGET_DIR=${PBGEN_TARGET:-target} cargo run -q -p pbgen --bin goorder -- "$pb" libs/kapi/src/server/order/table.rs
