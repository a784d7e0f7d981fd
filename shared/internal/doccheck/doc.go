// Package doccheck holds tests that keep the repository's documents true of
// its code: docs/requirements.md must define every requirement ID the code
// cites, and every file and test it names must exist. It has no code of its
// own.
package doccheck
