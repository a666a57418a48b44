#!/bin/bash
# docs/migration.md's generated tables equal `tessera-train --migration-table` (the parser's own
# rows), so the document cannot drift from the flags tessera-train accepts.
# Usage: migration_table.sh BUILD_BIN_DIR
BIN="${1:?usage: migration_table.sh BUILD_BIN_DIR}/tessera-train"
DOC="$(cd "$(dirname "$0")/../.." && pwd)/docs/migration.md"
source "$(dirname "$0")/lib.bash" migration-table
BEGIN='<!-- BEGIN generated: tessera-train --migration-table -->'
END='<!-- END generated -->'
awk -v b="$BEGIN" -v e="$END" '$0 == e {inside = 0} inside {print} $0 == b {inside = 1}' "$DOC" \
  >"$TMP/doc"
"$BIN" --migration-table >"$TMP/tool"
check "docs/migration.md has the generated section" [ -s "$TMP/doc" ]
check "it equals tessera-train --migration-table (regenerate with scripts/update_migration_doc.sh)" \
  diff -u "$TMP/doc" "$TMP/tool"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
