// Package demo holds the sample repository and workflow of `coordinator demo`.
package demo

import (
	"embed"
	"io/fs"
)

//go:embed repo workflow.yaml
var files embed.FS

// Workflow is the demo workflow file.
func Workflow() []byte {
	b, _ := files.ReadFile("workflow.yaml")
	return b
}

// Repo is the sample repository's files; each name carries a ".txt" suffix
// (so the Go tool does not treat them as code here) that is dropped on write.
func Repo() fs.FS {
	sub, _ := fs.Sub(files, "repo")
	return sub
}
