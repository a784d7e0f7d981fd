package agentoutput

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema names (TaskSpec.Output).
const (
	Generic        = "generic"
	Plan           = "plan"
	Implementation = "implementation"
	Review         = "review"
)

// Names are the schema names, sorted.
var Names = []string{Generic, Implementation, Plan, Review}

// Known reports whether name is a schema name.
func Known(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

//go:embed schemas/*.json
var schemaFS embed.FS

// compiled holds each schema, compiled once; a schema that does not
// compile is a bug of this package, caught by its tests.
var compiled = mustCompile()

func mustCompile() map[string]*jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	out := map[string]*jsonschema.Schema{}
	for _, name := range Names {
		url := "schemas/" + name + ".json"
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(SchemaDocument(name)))
		if err != nil {
			panic(fmt.Sprintf("agentoutput: schema %s: %v", name, err))
		}
		if err := c.AddResource(url, doc); err != nil {
			panic(fmt.Sprintf("agentoutput: schema %s: %v", name, err))
		}
		s, err := c.Compile(url)
		if err != nil {
			panic(fmt.Sprintf("agentoutput: schema %s: %v", name, err))
		}
		out[name] = s
	}
	return out
}

// SchemaDocument returns the JSON Schema document of the named schema
// (nil for an unknown name).
func SchemaDocument(name string) []byte {
	data, err := schemaFS.ReadFile("schemas/" + name + ".json")
	if err != nil {
		return nil
	}
	return data
}

// ErrNoBlock is the error of a message with no JSON block (OUT-06).
var ErrNoBlock = errors.New("no JSON block found in the agent's final message")

// ErrInvalid matches every *InvalidError with errors.Is.
var ErrInvalid = errors.New("the JSON block does not match the output schema")

// Violation is one way a block breaks its schema.
type Violation struct {
	// Path is a JSON pointer to the offending value ("" for the whole
	// block), e.g. /phases/0/components/2/id.
	Path string `json:"path"`
	// Message says what is wrong there.
	Message string `json:"message"`
}

// InvalidError is a block that is not valid JSON or breaks its schema
// (OUT-06). Violations lists every problem the validator found, sorted by
// path, at most MaxViolations of them.
type InvalidError struct {
	Schema     string      `json:"schema"`
	Violations []Violation `json:"violations"`
	// Omitted counts violations left out beyond MaxViolations.
	Omitted int `json:"omitted,omitempty"`
}

// MaxViolations caps InvalidError.Violations.
const MaxViolations = 20

func (e *InvalidError) Error() string {
	parts := make([]string, 0, len(e.Violations))
	for _, v := range e.Violations {
		p := v.Path
		if p == "" {
			p = "(the block)"
		}
		parts = append(parts, p+": "+v.Message)
	}
	s := fmt.Sprintf("output does not match schema %s: %s", e.Schema, strings.Join(parts, "; "))
	if e.Omitted > 0 {
		s += fmt.Sprintf(" (and %d more)", e.Omitted)
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) true for an *InvalidError.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

var printer = message.NewPrinter(language.English)

// Validate checks block against the named schema. It returns an
// *InvalidError when block is not one JSON value or breaks the schema,
// and a plain error for an unknown schema name.
func Validate(schema string, block []byte) error {
	s := compiled[schema]
	if s == nil {
		return fmt.Errorf("agentoutput: unknown output schema %q (known: %s)", schema, strings.Join(Names, ", "))
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(block))
	if err != nil {
		return &InvalidError{Schema: schema, Violations: []Violation{{Message: "not valid JSON: " + err.Error()}}}
	}
	err = s.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &InvalidError{Schema: schema, Violations: []Violation{{Message: err.Error()}}}
	}
	var vs []Violation
	leaves(ve, &vs)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Path < vs[j].Path })
	vs = dedupe(vs)
	ie := &InvalidError{Schema: schema, Violations: vs}
	if len(vs) > MaxViolations {
		ie.Violations, ie.Omitted = vs[:MaxViolations], len(vs)-MaxViolations
	}
	return ie
}

// leaves collects the innermost errors of a validation error tree: they
// say what is wrong where; the inner nodes only group them.
func leaves(e *jsonschema.ValidationError, out *[]Violation) {
	if len(e.Causes) == 0 {
		*out = append(*out, Violation{Path: pointer(e.InstanceLocation), Message: e.ErrorKind.LocalizedString(printer)})
		return
	}
	for _, c := range e.Causes {
		leaves(c, out)
	}
}

// pointer encodes a path as a JSON pointer (RFC 6901).
func pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(p))
	}
	return b.String()
}

func dedupe(vs []Violation) []Violation {
	out := vs[:0]
	for i, v := range vs {
		if i > 0 && v == vs[i-1] {
			continue
		}
		out = append(out, v)
	}
	return out
}

// compact returns block without insignificant white space.
func compact(block []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, block); err != nil {
		return append(json.RawMessage(nil), block...)
	}
	return b.Bytes()
}
