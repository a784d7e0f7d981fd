package gates

import (
	"reflect"
	"strings"
	"testing"

	"github.com/supervisorhq/supervisor/shared/protocol"
)

// cache_dirs (PERF-23): decoded strictly, each problem at its file:line:col.
func TestCacheDirsValidation(t *testing.T) {
	nine := "[" + strings.TrimSuffix(strings.Repeat("a/b, ", protocol.MaxCacheDirs+1), ", ") + "]"
	tests := []struct {
		name  string
		src   string
		wants []want
	}{
		{"relative and absolute accepted", one("cache_dirs", "[.npm, .cache/pip, /root/.cargo/registry, ./node/]"), nil},
		{"not a list", one("cache_dirs", ".npm"), []want{`4:17: gate "g" cache_dirs must be a list of directories, got a string`}},
		{"entries must be strings", one("cache_dirs", "[.npm, [x]]"), []want{`4:24: gate "g" cache_dirs entry must be a string, got a list`}},
		{"parent components", one("cache_dirs", "[../x, /a/../etc]"), []want{
			`4:18: gate "g" cache_dirs entry "../x" must not contain a '..' component`,
			`4:24: gate "g" cache_dirs entry "/a/../etc" must not contain a '..' component`}},
		{"empty and HOME itself", one("cache_dirs", `["", ., /, /tmp]`), []want{
			`4:18: gate "g" cache_dirs entry "" is empty`,
			`4:22: gate "g" cache_dirs entry "." names HOME itself`,
			`4:25: gate "g" cache_dirs entry "/" names / itself`,
			`4:28: gate "g" cache_dirs entry "/tmp" names /tmp itself`}},
		{"reserved container paths", one("cache_dirs", "[/workspace/node_modules, /proc/x, /run/supervisor]"), []want{
			`4:18: gate "g" cache_dirs entry "/workspace/node_modules" lies in /workspace`,
			`4:43: gate "g" cache_dirs entry "/proc/x" lies in /proc`,
			`4:52: gate "g" cache_dirs entry "/run/supervisor" lies in /run/supervisor`}},
		{"characters overlay options cannot carry", one("cache_dirs", `["a,b", "c:d", "e f"]`), []want{
			`4:18: gate "g" cache_dirs entry "a,b" may only contain letters, digits and . _ + @ / -`,
			`4:25: gate "g" cache_dirs entry "c:d" may only contain`,
			`4:32: gate "g" cache_dirs entry "e f" may only contain`}},
		{"overlapping entries", one("cache_dirs", "[.npm, .npm/_cacache, /x, /x]"), []want{
			`4:24: gate "g" cache_dirs entry ".npm/_cacache" overlaps the earlier entry ".npm"`,
			`4:43: gate "g" cache_dirs entry "/x" overlaps the earlier entry "/x"`}},
		{"Go's caches are every gate's already", one("cache_dirs", "[go/pkg/mod, .cache]"), []want{
			`4:18: gate "g" cache_dirs entry "go/pkg/mod" overlaps go/pkg/mod, a cache every gate gets already`,
			`4:30: gate "g" cache_dirs entry ".cache" overlaps .cache/go-build, a cache every gate gets already`}},
		{"bounded count", one("cache_dirs", nine), []want{`4:17: gate "g" cache_dirs lists 9 directories; at most 8 are allowed`}},
		{"not on a review gate", "gates:\n  r:\n    type: review\n    agent: {adapter: claude}\n    cache_dirs: [.npm]\n",
			[]want{`5:5: gate "r": cache_dirs is for command gates`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseYAML(t, tt.src)
			if tt.name == "not on a review gate" {
				if err == nil || !strings.Contains(err.Error(), "g.yaml:5:5: gate \"r\": cache_dirs is for command gates") {
					t.Fatalf("error %v, want one at g.yaml:5:5 about cache_dirs", err)
				}
				return
			}
			checkProblems(t, "g.yaml", tt.src, err, tt.wants)
		})
	}
}

// A gate's cache_dirs, cleaned, survive the wire form both ways, in TOML
// files too.
func TestCacheDirsRoundTrip(t *testing.T) {
	gs, err := parseYAML(t, one("cache_dirs", "[./.npm/, /root/.cargo/registry]"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".npm", "/root/.cargo/registry"}
	if !reflect.DeepEqual(gs[0].CacheDirs, want) {
		t.Fatalf("CacheDirs %q, want %q", gs[0].CacheDirs, want)
	}
	spec := gs[0].Spec()
	if !reflect.DeepEqual(spec.CacheDirs, want) {
		t.Fatalf("Spec().CacheDirs %q, want %q", spec.CacheDirs, want)
	}
	if back := FromSpec(spec); !reflect.DeepEqual(back.CacheDirs, want) {
		t.Fatalf("FromSpec(...).CacheDirs %q, want %q", back.CacheDirs, want)
	}
	tg, _, err := ParseFile("gates.toml", []byte("[[gate]]\nname = \"g\"\ncommand = [\"npm\", \"test\"]\ncache_dirs = [\"/x\", \"../y\"]\n"), OriginProject)
	if err == nil || !strings.Contains(err.Error(), `gates.toml:4:`) || !strings.Contains(err.Error(), `"../y" must not contain a '..' component`) {
		t.Fatalf("TOML: gates %v, error %v; want the '..' entry reported at gates.toml:4", tg, err)
	}
}
