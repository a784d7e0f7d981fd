package templates

import (
	"errors"
	"testing"

	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
)

// FuzzFeature feeds arbitrary feature descriptions through ParseFeature
// and the mvp template: nothing panics, and whatever expands is a YAML
// document the workflow parser reads (it may reject it, with problems,
// but never fails to decode it).
func FuzzFeature(f *testing.F) {
	for _, seed := range []string{
		"# Title\n\nBody.\n",
		"---\nname: x\npool: p\ngates: [go-build]\ndisable: [quick_review]\nsteps:\n  implement: {prompt: \"{{.Title}}\"}\n---\n# T\nb\n",
		"---\nsteps:\n  extra: {role: reviewer, depends_on: [implement], approval: {timeout: 1h, on_timeout: reject}}\n---\nx: \"quoted\" | `code` {{.Feature}}\n",
		"---\n---\n",
		"---\nname: [\n---\n",
		"plain text with ---\n--- and : colons # and hashes\n",
	} {
		f.Add(seed)
	}
	c, err := Load(Options{BuiltinDir: "../../../configs/templates"})
	if err != nil {
		f.Fatal(err)
	}
	tpl, _ := c.Get("mvp")
	f.Fuzz(func(t *testing.T, src string) {
		feat, err := ParseFeature("f.md", []byte(src))
		if err != nil {
			return
		}
		doc, err := tpl.Expand(feat)
		if err != nil {
			return
		}
		_, err = workflow.Parse("f.yaml", doc)
		if err == nil {
			return
		}
		var ve *gates.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("parse error is not a validation error: %v", err)
		}
		for _, p := range ve.Problems {
			if len(p.Message) > 12 && p.Message[:12] == "invalid YAML" {
				t.Fatalf("the expansion is not valid YAML: %v\n%s", p, doc)
			}
		}
	})
}
