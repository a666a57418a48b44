#!/bin/bash
# Rewrites docs/migration.md's generated section from `tessera-train --migration-table`.
# Usage: scripts/update_migration_doc.sh [BUILD_BIN_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$ROOT/build/bin}/tessera-train"
DOC="$ROOT/docs/migration.md"
BEGIN='<!-- BEGIN generated: tessera-train --migration-table -->'
END='<!-- END generated -->'
"$BIN" --migration-table >"$DOC.table"
awk -v b="$BEGIN" -v e="$END" -v t="$DOC.table" '
  $0 == b {print; while ((getline line < t) > 0) print line; skip = 1; next}
  $0 == e {skip = 0}
  !skip {print}' "$DOC" >"$DOC.new"
mv "$DOC.new" "$DOC"
rm -f "$DOC.table"
