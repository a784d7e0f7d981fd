package gates

import (
	"testing"

	"github.com/supervisorhq/supervisor/shared/testkit"
)

// want is an expected problem: "line:col: message substring", or
// ":: message substring" for a problem about the whole file.
type want = string

// checkProblems asserts that err is a *ValidationError whose problems match
// wants exactly (see testkit.CheckProblems).
func checkProblems(t *testing.T, file, src string, err error, wants []want) {
	t.Helper()
	testkit.CheckProblems(t, file, src, err, wants, func(ve *ValidationError) []Problem { return ve.Problems })
}

// parseYAML parses a YAML gate file named g.yaml.
func parseYAML(t *testing.T, src string) ([]Gate, error) {
	t.Helper()
	gs, _, err := ParseFile("g.yaml", []byte(src), OriginProject)
	return gs, err
}
