// Package db holds the database schema as golang-migrate migrations, embedded
// in the binary so that `api serve` and `api migrate` need no files on disk.
// sqlc reads the same directory as its schema, so the generated code and the
// running database cannot disagree.
package db

import "embed"

// Migrations holds migrations/*.sql, named NNNNNN_title.{up,down}.sql.
//
//go:embed migrations/*.sql
var Migrations embed.FS
