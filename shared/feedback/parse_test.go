package feedback

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// want is what a test expects of one parsed failure: name, file, line and
// runner exactly, and a piece of the message.
type want struct {
	name, file string
	line       int
	runner     string
	msg        string // a substring of the message; "" checks nothing
}

func checkFailures(t *testing.T, got []TestFailure, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Errorf("got %d failures, want %d:", len(got), len(wants))
		for _, g := range got {
			t.Errorf("  %+v", g)
		}
		return
	}
	for i, w := range wants {
		g := got[i]
		if g.Name != w.name || g.File != w.file || g.Line != w.line || g.Runner != w.runner {
			t.Errorf("failure %d = %q %s:%d (%s), want %q %s:%d (%s)", i, g.Name, g.File, g.Line, g.Runner, w.name, w.file, w.line, w.runner)
		}
		if !strings.Contains(g.Message, w.msg) {
			t.Errorf("failure %d (%s): message %q does not contain %q", i, g.Name, g.Message, w.msg)
		}
	}
}

// fx is where record.sh copies the projects before running them.
const fx = "/tmp/supervisor-feedback-fixtures/"

// TestParseTestsFixtures reads outputs recorded from real runners
// (testdata/README.md), except jest.txt (FB-09, S-8.2).
func TestParseTestsFixtures(t *testing.T) {
	goWant := []want{
		{"example.com/fbfixture/broken [build failed]", "broken/broken.go", 5, RunnerGo, "undefined: y"},
		{"TestThird", fx + "gotest/boom/boom.go", 5, RunnerGo, "panic: runtime error: index out of range [3] with length 3"},
		{"TestAdd", "calc_test.go", 7, RunnerGo, "Add(2, 2) = 5, want 4"},
		{"TestDiv/by_zero", "calc_test.go", 25, RunnerGo, "Div(1, 0) = 0, true; want 0, false"},
	}
	pyWant := []want{
		{"test_add", "tests/test_calc.py", 7, RunnerPytest, "assert 5 == 4"},
		{"test_add_table[1-1-2]", "tests/test_calc.py", 12, RunnerPytest, "assert 3 == 2"},
		{"test_add_table[0-0-0]", "tests/test_calc.py", 12, RunnerPytest, "assert 1 == 0"},
		{"test_parse_port", "tests/test_calc.py", 16, RunnerPytest, "ValueError: invalid literal for int() with base 10: '80x'"},
		{"TestGreeting::test_hello", "tests/test_calc.py", 21, RunnerPytest, "assert 'HELLO' == 'Hello'"},
	}
	cargoWant := []want{
		{"tests::adds", "src/lib.rs", 15, RunnerCargo, "assertion `left == right` failed\n  left: 5\n right: 4"},
		{"tests::third_element", "src/lib.rs", 6, RunnerCargo, "index out of bounds: the len is 3 but the index is 3"},
		{"add_zero", "tests/api.rs", 9, RunnerCargo, "add(0, 0) should be 0, got 1"},
	}
	tests := []struct {
		file  string
		wants []want
	}{
		{"go-test.txt", goWant},
		{"go-test-v.txt", goWant},
		{"pytest.txt", pyWant},
		{"pytest-q.txt", pyWant},
		{"node-test.txt", []want{
			{"add adds", fx + "nodetest/calc.test.js", 6, RunnerNode, "AssertionError: Expected values to be strictly equal:\n\n5 !== 4"},
			{"parsePort > rejects letters", fx + "nodetest/calc.test.js", 14, RunnerNode, "TypeError: not a port: 80x"},
		}},
		{"node-test-spec.txt", []want{
			{"add adds", fx + "nodetest/calc.test.js", 6, RunnerNode, "5 !== 4"},
			{"parsePort > rejects letters", fx + "nodetest/calc.test.js", 14, RunnerNode, "not a port: 80x"},
		}},
		// jest.txt is written by hand after jest's documented output format:
		// jest could not be installed where the others were recorded.
		{"jest.txt", []want{
			{"add › adds two numbers", "src/calc.test.js", 8, RunnerJest, "Expected: 4\nReceived: 5"},
			{"parsePort › rejects letters", "src/calc.test.js", 15, RunnerJest, "TypeError: not a port: 80x"},
			{"src/config.test.js › Test suite failed to run", "src/config.test.js", 1, RunnerJest, "Cannot find module './settings'"},
		}},
		{"cargo-test.txt", cargoWant},
		{"cargo-test-q.txt", cargoWant},
		{"cargo-build.txt", []want{
			{"fbbroken [build failed]", "src/lib.rs", 2, RunnerCargo, "E0425: cannot find value `y` in this scope"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			checkFailures(t, ParseTests(string(b)), tc.wants)
		})
	}
}

// TestParseTestsCases covers forms the recordings do not: parallel -v
// output, multi-line messages, go vet, test timeouts, pytest without its
// summary, TAP directives, colours, and output no parser knows.
func TestParseTestsCases(t *testing.T) {
	tests := []struct {
		name   string
		output string
		wants  []want
	}{
		{"go nested subtests and a multi-line message", `--- FAIL: TestParse (0.00s)
    --- FAIL: TestParse/empty (0.00s)
        parse_test.go:40: got:
            nothing
            want: something
    --- FAIL: TestParse/space (0.00s)
        parse_test.go:41: bad space
FAIL
`, []want{
			{"TestParse/empty", "parse_test.go", 40, RunnerGo, "got:\nnothing\nwant: something"},
			{"TestParse/space", "parse_test.go", 41, RunnerGo, "bad space"},
		}},
		{"go -v with parallel tests", `=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== PAUSE TestB
=== CONT  TestA
=== CONT  TestB
    b_test.go:9: b broke
=== NAME  TestA
    a_test.go:5: a broke
--- FAIL: TestB (0.00s)
--- FAIL: TestA (0.00s)
FAIL
`, []want{
			{"TestB", "b_test.go", 9, RunnerGo, "b broke"},
			{"TestA", "a_test.go", 5, RunnerGo, "a broke"},
		}},
		{"go build failure, old style paths", "# example.com/x\n./x.go:3:2: undefined: y\n./x.go:4:9: cannot use s (variable of type string) as int value in return statement\nFAIL\texample.com/x [build failed]\n", []want{
			{"example.com/x [build failed]", "./x.go", 3, RunnerGo, "undefined: y"},
			{"example.com/x [build failed]", "./x.go", 4, RunnerGo, "cannot use s"},
		}},
		{"go vet during go test", "# example.com/x\n# [example.com/x]\n./x_test.go:9:2: fmt.Printf format %d has arg s of wrong type string\nFAIL\texample.com/x [build failed]\n", []want{
			{"example.com/x [build failed]", "./x_test.go", 9, RunnerGo, "fmt.Printf format %d"},
		}},
		{"go test timeout (go 1.26's layout)", "panic: test timed out after 1s\n\trunning tests:\n\t\tTestSlow (1s)\n\t\tTestSlower (1s)\n\ngoroutine 5 [running]:\n", []want{
			{"TestSlow", "", 0, RunnerGo, "panic: test timed out after 1s"},
			{"TestSlower", "", 0, RunnerGo, "panic: test timed out after 1s"},
		}},
		{"go output in colour", "\x1b[31m--- FAIL: TestRed (0.00s)\x1b[0m\n    red_test.go:3: \x1b[1mred\x1b[0m\n", []want{
			{"TestRed", "red_test.go", 3, RunnerGo, "red"},
		}},
		{"pytest tracebacks without a summary", `=================================== FAILURES ===================================
_________________________________ test_split __________________________________

    def test_split():
>       assert split("a,b") == ["a", "b"]
E       AssertionError: assert ['a,b'] == ['a', 'b']

tests/test_text.py:4: AssertionError
=========================== 1 failed in 0.01s ===========================
`, []want{
			{"test_split", "tests/test_text.py", 4, RunnerPytest, "assert ['a,b'] == ['a', 'b']"},
		}},
		{"pytest setup error and collection error", `==================================== ERRORS ====================================
____________________ ERROR at setup of test_db ____________________

    @pytest.fixture
    def db():
>       raise RuntimeError("no database")
E       RuntimeError: no database

tests/conftest.py:5: RuntimeError
=========================== short test summary info ============================
ERROR tests/test_db.py::test_db - RuntimeError: no database
ERROR tests/test_broken.py - ModuleNotFoundError: No module named 'nope'
`, []want{
			{"test_db", "tests/conftest.py", 5, RunnerPytest, "RuntimeError: no database"},
			{"tests/test_broken.py", "tests/test_broken.py", 0, RunnerPytest, "No module named 'nope'"},
		}},
		{"TAP with TODO and SKIP directives", "TAP version 13\nnot ok 1 - later # TODO not written\nnot ok 2 - gone # SKIP\nnot ok 3 - real\n  ---\n  location: 'file:///src/a.test.mjs:3:1'\n  error: 'boom'\n  ...\n1..3\n", []want{
			{"real", "/src/a.test.mjs", 3, RunnerNode, "boom"},
		}},
		{"jest list only", "FAIL src/a.test.js\n  ✕ does a thing (3 ms)\n  ✓ does another (1 ms)\n\nTests:       1 failed, 1 passed, 2 total\n", []want{
			{"does a thing", "src/a.test.js", 0, RunnerJest, ""},
		}},
		{"cargo before Rust 1.73", "running 1 test\ntest it_parses ... FAILED\n\nfailures:\n\n---- it_parses stdout ----\nthread 'it_parses' panicked at 'called `Result::unwrap()` on an `Err` value: Empty', src/parse.rs:30:14\n\nfailures:\n    it_parses\n", []want{
			{"it_parses", "src/parse.rs", 30, RunnerCargo, "called `Result::unwrap()` on an `Err` value: Empty"},
		}},
		{"cargo failures list only", "failures:\n    a::b\n    c\n\ntest result: FAILED. 0 passed; 2 failed\n", []want{
			{"a::b", "", 0, RunnerCargo, ""},
			{"c", "", 0, RunnerCargo, ""},
		}},
		{"lint output is no test", "x.go:3:1: exported function X should have comment (revive)\nsrc/a.py:1:1: F401 'os' imported but unused\n", nil},
		{"a shell script's output", "building...\nerror: something went wrong\nexit status 2\n", nil},
		{"empty", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkFailures(t, ParseTests(tc.output), tc.wants)
		})
	}
}

// The message of a parsed failure is sanitized and capped.
func TestParseTestsSanitizesMessages(t *testing.T) {
	out := "--- FAIL: TestLeak (0.00s)\n    leak_test.go:3: token=abc123 \u202eevil\u202c " + strings.Repeat("x", 3*maxMessageBytes) + "\n"
	got := ParseTests(out)
	if len(got) != 1 {
		t.Fatalf("got %+v", got)
	}
	m := got[0].Message
	if strings.Contains(m, "abc123") || strings.ContainsRune(m, '\u202e') {
		t.Errorf("message not sanitized: %q", m[:60])
	}
	if len(m) > maxMessageBytes+len("…") {
		t.Errorf("message is %d bytes, want at most %d", len(m), maxMessageBytes)
	}
}
