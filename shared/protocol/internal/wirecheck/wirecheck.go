// Package wirecheck helps the protocol's tests hold the JSON library the
// wire is encoded with (goccy/go-json) to encoding/json's output and
// reading, so that peers and logs of builds using either agree.
package wirecheck

import (
	"encoding/json"
	"reflect"
	"sort"
	"time"
)

// Strings are the values a Filler gives string fields in turn: characters
// encoding/json escapes (HTML's, quotes, control characters, U+2028),
// non-ASCII text, and bytes that are not valid UTF-8.
var Strings = []string{
	"plain",
	`<a href="x">&amp;</a>`,
	"tab\tnew\nline\r\"quote\" back\\slash \x01\x1f",
	"line\u2028separator\u2029paragraph",
	"café ünïcødé 日本語 🚀",
	"bad \xff\xfe utf-8 \xc3",
	"",
}

// Floats are the values a Filler gives float fields in turn: where
// encoding/json switches between plain and exponent notation, and values
// that do not round-trip in fewer digits.
var Floats = []float64{0.1, 1e21, 1e-7, 123456789.125, 0.000001, 3.14159265358979, -2.5e-300, 0}

// Times are the values a Filler gives time fields in turn (in UTC, as the
// protocol writes them): with and without fractions of a second.
var Times = []time.Time{
	time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC),
	time.Date(2026, 11, 25, 1, 2, 3, 456789012, time.UTC),
	time.Date(1999, 12, 31, 23, 59, 59, 100000000, time.UTC),
}

// anys are the values a Filler gives fields of type any in turn: what
// encoding/json reads JSON into (numbers as float64).
var anys = []func() any{
	func() any { return "text <&>" },
	func() any { return 1.5e300 },
	func() any { return true },
	func() any { return map[string]any{"k": []any{1.0, "two", nil, false}, "z": map[string]any{}} },
	func() any { return []any{"a", 2.25, map[string]any{"b": nil}} },
}

// maxDepth bounds the nesting a Filler follows (the protocol's types are
// not recursive; this only guards against a type that would be).
const maxDepth = 32

// A Filler sets the exported fields of protocol values and remembers which
// fields of which struct types it gave a value that is not zero, so a test
// can tell that every field it can reach was exercised (Unset).
type Filler struct {
	n         int
	reachable map[string]bool
	set       map[string]bool
}

// NewFiller returns a Filler that has filled nothing yet.
func NewFiller() *Filler {
	return &Filler{reachable: map[string]bool{}, set: map[string]bool{}}
}

// Fill sets the struct v points to, recursively, from the lists above
// picked by variant (a different variant gives different values). Even
// variants set every exported field to a value that is not zero; odd ones
// leave about every other field at its zero value (nil pointers, slices
// and maps, false, empty strings), so omitempty and omitzero are
// exercised too. Maps get three keys, slices two elements; json.RawMessage
// fields get a small JSON value.
func (f *Filler) Fill(v any, variant int) {
	f.n = variant
	f.fill(reflect.ValueOf(v).Elem(), 0, variant%2 == 1)
}

// Unset lists, as Type.Field, the exported fields of every struct type
// Fill has met that it never gave a value other than zero.
func (f *Filler) Unset() []string {
	var out []string
	for k := range f.reachable {
		if !f.set[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (f *Filler) next() int { f.n++; return f.n }

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
)

func (f *Filler) fill(v reflect.Value, depth int, sparse bool) {
	if depth > maxDepth {
		return
	}
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(Times[f.next()%len(Times)]))
		return
	case v.Type() == rawType:
		v.SetBytes([]byte(`{"k":[1,"two",null,true]}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(Strings[f.next()%len(Strings)])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := int64(f.next())
		if n%2 == 0 {
			n = -n
		}
		if v.OverflowInt(n * 1000003) {
			v.SetInt(n % 100)
		} else {
			v.SetInt(n * 1000003)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := uint64(f.next())
		if v.OverflowUint(n * 1000003) {
			v.SetUint(n % 100)
		} else {
			v.SetUint(n * 1000003)
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(Floats[f.next()%len(Floats)])
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf(anys[f.next()%len(anys)]()))
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1, sparse)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i), depth+1, sparse)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), depth+1, sparse)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 3 {
			k := reflect.New(v.Type().Key()).Elem()
			f.fill(k, depth+1, sparse)
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1, sparse)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			field := t.Field(i)
			if !field.IsExported() {
				continue
			}
			name := t.String() + "." + field.Name
			f.reachable[name] = true
			if sparse && f.next()%2 == 0 {
				continue
			}
			f.fill(v.Field(i), depth+1, sparse)
			if !v.Field(i).IsZero() {
				f.set[name] = true
			}
		}
	}
}
