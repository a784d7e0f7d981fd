// Package wirecheck helps the protocol's tests hold the JSON library the
// wire is encoded with (goccy/go-json) to encoding/json's output and
// reading, so that peers and logs of builds using either agree.
package wirecheck

import (
	"encoding/json"
	"reflect"
	"time"
)

// Strings are the values Fill gives string fields in turn: characters
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

// Floats are the values Fill gives float fields in turn: where
// encoding/json switches between plain and exponent notation, and values
// that do not round-trip in fewer digits.
var Floats = []float64{0.1, 1e21, 1e-7, 123456789.125, 0.000001, 3.14159265358979, -2.5e-300, 0}

// Times are the values Fill gives time fields in turn (in UTC, as the
// protocol writes them): with and without fractions of a second.
var Times = []time.Time{
	time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC),
	time.Date(2026, 11, 25, 1, 2, 3, 456789012, time.UTC),
	time.Date(1999, 12, 31, 23, 59, 59, 100000000, time.UTC),
}

// Fill sets every exported field of the struct v points to, recursively,
// to a value that is not zero, taken from the lists above by variant (a
// different variant gives different values). Maps get three keys, slices
// two elements; json.RawMessage fields get a small JSON object. Nesting
// stops at depth 4.
func Fill(v any, variant int) {
	f := filler{n: variant}
	f.fill(reflect.ValueOf(v).Elem(), 0)
}

type filler struct{ n int }

func (f *filler) next() int { f.n++; return f.n }

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
)

func (f *filler) fill(v reflect.Value, depth int) {
	if depth > 4 {
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
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 3 {
			k := reflect.New(v.Type().Key()).Elem()
			f.fill(k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	}
}
