package statemachine

// The snapshot's value codec: a binary encoding of Go values by reflection
// that gives back exactly the value written — every field, unexported ones
// included; nil and empty slices and maps told apart; times with their
// zone as the event log's JSON gives them (RFC 3339 text: a time taken
// from the clock reads back as it would from the log) — which encoding/json (omitempty, null
// into json.RawMessage) and encoding/gob (empty slices dropped) do not.
// What it encodes is fixed by the Go types, so a snapshot carries their
// fingerprint (typeFingerprint) and is read only by code whose types have
// the same one.

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"
	"unsafe"
)

// skipped are fields the codec leaves out, by struct type and field name:
// what the state derives again when it takes the value in (the workflow's
// fleet, set by Put; a node's task and gate plan, from its own task or the
// spec's, by relink) or recomputes on demand (the overlap cache, its lock,
// the nodes in order), and the engine's hints about published jobs, which
// a state read back asks the engine about again.
var skipped = map[reflect.Type]map[string]bool{
	reflect.TypeFor[Workflow](): {"fleet": true, "overlaps": true, "overlapMu": true, "orderNodes": true, "orderKey": true},
	reflect.TypeFor[Node]():     {"Task": true, "plan": true, "publishedJob": true},
	reflect.TypeFor[GateRun]():  {"publishedJob": true},
	// Set again by Put and SetPromptSource.
	reflect.TypeFor[promptsInLog](): {"src": true, "leave": true},
}

var timeType = reflect.TypeFor[time.Time]()

// errCorrupt is a snapshot whose bytes do not make values.
var errCorrupt = errors.New("corrupt snapshot value")

// valueWriter encodes values onto w.
type valueWriter struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
}

func (e *valueWriter) uvarint(x uint64) error {
	n := binary.PutUvarint(e.buf[:], x)
	_, err := e.w.Write(e.buf[:n])
	return err
}

func (e *valueWriter) varint(x int64) error {
	n := binary.PutVarint(e.buf[:], x)
	_, err := e.w.Write(e.buf[:n])
	return err
}

func (e *valueWriter) flag(set bool) error {
	if set {
		return e.w.WriteByte(1)
	}
	return e.w.WriteByte(0)
}

// accessible returns v's field i, readable (and settable) even when
// unexported. v must be addressable.
func accessible(v reflect.Value, i int) reflect.Value {
	f := v.Field(i)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

func (e *valueWriter) value(v reflect.Value) error {
	switch v.Kind() {
	case reflect.Bool:
		return e.flag(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return e.varint(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return e.uvarint(v.Uint())
	case reflect.Float32, reflect.Float64:
		return e.uvarint(math.Float64bits(v.Float()))
	case reflect.String:
		if err := e.uvarint(uint64(v.Len())); err != nil {
			return err
		}
		_, err := e.w.WriteString(v.String())
		return err
	case reflect.Pointer:
		if err := e.flag(!v.IsNil()); err != nil || v.IsNil() {
			return err
		}
		return e.value(v.Elem())
	case reflect.Slice:
		if err := e.flag(!v.IsNil()); err != nil || v.IsNil() {
			return err
		}
		if err := e.uvarint(uint64(v.Len())); err != nil {
			return err
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			_, err := e.w.Write(v.Bytes())
			return err
		}
		for i := range v.Len() {
			if err := e.value(v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Array:
		for i := range v.Len() {
			if err := e.value(v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		return e.mapValue(v)
	case reflect.Struct:
		return e.structValue(v)
	}
	return fmt.Errorf("statemachine: snapshot: cannot encode a %s", v.Type())
}

func (e *valueWriter) mapValue(v reflect.Value) error {
	if err := e.flag(!v.IsNil()); err != nil || v.IsNil() {
		return err
	}
	if err := e.uvarint(uint64(v.Len())); err != nil {
		return err
	}
	// Keys in order, so the same state always gives the same bytes.
	keys := v.MapKeys()
	names := make([]string, len(keys))
	for i, k := range keys {
		if k.Kind() == reflect.String {
			names[i] = k.String()
		} else {
			names[i] = fmt.Sprint(k)
		}
	}
	sort.Sort(byName{keys, names})
	for _, k := range keys {
		if err := e.value(k); err != nil {
			return err
		}
		if err := e.value(v.MapIndex(k)); err != nil {
			return err
		}
	}
	return nil
}

// byName sorts map keys by their names.
type byName struct {
	keys  []reflect.Value
	names []string
}

func (b byName) Len() int           { return len(b.keys) }
func (b byName) Less(i, j int) bool { return b.names[i] < b.names[j] }
func (b byName) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.names[i], b.names[j] = b.names[j], b.names[i]
}

func (e *valueWriter) structValue(v reflect.Value) error {
	if v.Type() == timeType {
		b, err := v.Interface().(time.Time).MarshalText()
		if err != nil {
			return fmt.Errorf("statemachine: snapshot: %w", err)
		}
		if err := e.uvarint(uint64(len(b))); err != nil {
			return err
		}
		_, err = e.w.Write(b)
		return err
	}
	if !v.CanAddr() {
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		v = c
	}
	skip := skipped[v.Type()]
	for i := range v.NumField() {
		if skip[v.Type().Field(i).Name] {
			continue
		}
		if err := e.value(accessible(v, i)); err != nil {
			return err
		}
	}
	return nil
}

// valueReader decodes values from r, never reading past limit bytes: a
// length beyond what is left is corrupt, not an allocation.
type valueReader struct {
	r     *bufio.Reader
	limit int64
}

func (d *valueReader) ReadByte() (byte, error) {
	if d.limit <= 0 {
		return 0, fmt.Errorf("%w: it ends early", errCorrupt)
	}
	b, err := d.r.ReadByte()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	d.limit--
	return b, nil
}

func (d *valueReader) uvarint() (uint64, error) {
	x, err := binary.ReadUvarint(d)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return x, nil
}

// length reads a length of items at least min bytes each.
func (d *valueReader) length(minBytes int64) (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if minBytes < 1 {
		minBytes = 1
	}
	if n > uint64(d.limit/minBytes) {
		return 0, fmt.Errorf("%w: a length of %d with %d bytes left", errCorrupt, n, d.limit)
	}
	return int(n), nil
}

func (d *valueReader) bytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	d.limit -= int64(n)
	return b, nil
}

func (d *valueReader) flag() (bool, error) {
	b, err := d.ReadByte()
	if err != nil {
		return false, err
	}
	if b > 1 {
		return false, fmt.Errorf("%w: flag %d", errCorrupt, b)
	}
	return b == 1, nil
}

// value decodes into v, which is settable.
func (d *valueReader) value(v reflect.Value) error {
	switch v.Kind() {
	case reflect.Bool:
		b, err := d.flag()
		v.SetBool(b)
		return err
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x, err := binary.ReadVarint(d)
		if err != nil {
			return fmt.Errorf("%w: %w", errCorrupt, err)
		}
		v.SetInt(x)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x, err := d.uvarint()
		v.SetUint(x)
		return err
	case reflect.Float32, reflect.Float64:
		x, err := d.uvarint()
		v.SetFloat(math.Float64frombits(x))
		return err
	case reflect.String:
		n, err := d.length(1)
		if err != nil {
			return err
		}
		b, err := d.bytes(n)
		v.SetString(string(b))
		return err
	case reflect.Pointer:
		set, err := d.flag()
		if err != nil || !set {
			return err
		}
		p := reflect.New(v.Type().Elem())
		if err := d.value(p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Slice:
		return d.sliceValue(v)
	case reflect.Array:
		for i := range v.Len() {
			if err := d.value(v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		return d.mapValue(v)
	case reflect.Struct:
		return d.structValue(v)
	}
	return fmt.Errorf("statemachine: snapshot: cannot decode a %s", v.Type())
}

func (d *valueReader) sliceValue(v reflect.Value) error {
	set, err := d.flag()
	if err != nil || !set {
		return err
	}
	if v.Type().Elem().Kind() == reflect.Uint8 {
		n, err := d.length(1)
		if err != nil {
			return err
		}
		b, err := d.bytes(n)
		if err != nil {
			return err
		}
		v.SetBytes(b)
		return nil
	}
	n, err := d.length(1)
	if err != nil {
		return err
	}
	s := reflect.MakeSlice(v.Type(), n, n)
	for i := range n {
		if err := d.value(s.Index(i)); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

func (d *valueReader) mapValue(v reflect.Value) error {
	set, err := d.flag()
	if err != nil || !set {
		return err
	}
	n, err := d.length(2)
	if err != nil {
		return err
	}
	m := reflect.MakeMapWithSize(v.Type(), n)
	for range n {
		k := reflect.New(v.Type().Key()).Elem()
		if err := d.value(k); err != nil {
			return err
		}
		x := reflect.New(v.Type().Elem()).Elem()
		if err := d.value(x); err != nil {
			return err
		}
		m.SetMapIndex(k, x)
	}
	v.Set(m)
	return nil
}

func (d *valueReader) structValue(v reflect.Value) error {
	if v.Type() == timeType {
		n, err := d.length(1)
		if err != nil {
			return err
		}
		b, err := d.bytes(n)
		if err != nil {
			return err
		}
		var t time.Time
		if err := t.UnmarshalText(b); err != nil {
			return fmt.Errorf("%w: %w", errCorrupt, err)
		}
		v.Set(reflect.ValueOf(t))
		return nil
	}
	skip := skipped[v.Type()]
	for i := range v.NumField() {
		if skip[v.Type().Field(i).Name] {
			continue
		}
		if err := d.value(accessible(v, i)); err != nil {
			return err
		}
	}
	return nil
}

// typeFingerprint identifies the shape of what the codec writes for the
// types: every type reached, its kind and its fields by name, in order.
// Code whose state types differ has another fingerprint.
func typeFingerprint(types ...reflect.Type) string {
	var b strings.Builder
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		fmt.Fprintf(&b, "%s.%s:%s", t.PkgPath(), t.Name(), t.Kind())
		if seen[t] {
			b.WriteString(";")
			return
		}
		seen[t] = true
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice:
			b.WriteString("(")
			walk(t.Elem())
			b.WriteString(")")
		case reflect.Array:
			fmt.Fprintf(&b, "[%d](", t.Len())
			walk(t.Elem())
			b.WriteString(")")
		case reflect.Map:
			b.WriteString("(")
			walk(t.Key())
			b.WriteString(",")
			walk(t.Elem())
			b.WriteString(")")
		case reflect.Struct:
			if t == timeType {
				break
			}
			b.WriteString("{")
			for i := range t.NumField() {
				f := t.Field(i)
				if skipped[t][f.Name] {
					continue
				}
				b.WriteString(f.Name + " ")
				walk(f.Type)
				b.WriteString(";")
			}
			b.WriteString("}")
		}
		b.WriteString(";")
	}
	for _, t := range types {
		walk(t)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}
