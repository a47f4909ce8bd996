// Package migrations embeds schedloop's numbered SQL migrations so every binary
// carries the schema it was built for. The store applies them with goose; this
// package only holds the files.
package migrations

import "embed"

// FS holds the goose-annotated migration files, named NNNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
