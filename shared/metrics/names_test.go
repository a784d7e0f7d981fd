package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// definedNames are the names of every metric defined here.
func definedNames(t *testing.T) map[string]bool {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range supervisorCollectors() {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			names[m[1]] = true
		}
	}
	return names
}

// mentioned returns the supervisor_ metric names a file mentions, a
// histogram's _bucket, _sum and _count series as the histogram.
func mentioned(t *testing.T, path string, defined map[string]bool) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range regexp.MustCompile(`supervisor_[a-z_]+[a-z]`).FindAllString(string(b), -1) {
		if !defined[n] {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && defined[base] {
					n = base
				}
			}
		}
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// docs/metrics.md lists every metric, and it and the Grafana dashboard
// name no metric that does not exist.
func TestDocsAndDashboardNameRealMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	defined := definedNames(t)
	if len(defined) < 20 {
		t.Fatalf("only %d metrics defined: %v", len(defined), defined)
	}
	doc := filepath.Join(root, "docs", "metrics.md")
	inDoc := map[string]bool{}
	for _, n := range mentioned(t, doc, defined) {
		inDoc[n] = true
		if !defined[n] {
			t.Errorf("docs/metrics.md names %s, which is not defined", n)
		}
	}
	for n := range defined {
		if !inDoc[n] {
			t.Errorf("docs/metrics.md does not list %s", n)
		}
	}
	for _, n := range mentioned(t, filepath.Join(root, "deploy", "grafana", "supervisor.json"), defined) {
		if !defined[n] {
			t.Errorf("the Grafana dashboard queries %s, which is not defined", n)
		}
	}
}
