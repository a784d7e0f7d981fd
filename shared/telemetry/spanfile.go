package telemetry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// FileSpan is one span as the file and stdout exporters write it (the
// fields of OpenTelemetry's span stub that say where it sits in its trace
// and what it describes).
type FileSpan struct {
	Name        string
	SpanContext FileSpanContext
	Parent      FileSpanContext
	Attributes  []FileAttribute
	Resource    []FileAttribute
	Status      struct {
		Code        string
		Description string
	}
}

// FileSpanContext is a span's identity in the file.
type FileSpanContext struct {
	TraceID string
	SpanID  string
}

// noParent is the span id of a root span's (zero) parent.
const noParent = "0000000000000000"

// HasParent reports whether the span has a parent.
func (s FileSpan) HasParent() bool { return s.Parent.SpanID != "" && s.Parent.SpanID != noParent }

// FileAttribute is one attribute of a span or of its resource.
type FileAttribute struct {
	Key   string
	Value struct {
		Type  string
		Value any
	}
}

// Attr returns the span's attribute key as text ("" when absent).
func (s FileSpan) Attr(key string) string { return attr(s.Attributes, key) }

// ResourceAttr returns the attribute key of the span's resource (the
// process that recorded it: service.name, process.pid, host.name).
func (s FileSpan) ResourceAttr(key string) string { return attr(s.Resource, key) }

func attr(attrs []FileAttribute, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// ReadSpans decodes the spans a file or stdout exporter wrote to r, one
// JSON object after another.
func ReadSpans(r io.Reader) ([]FileSpan, error) {
	dec := json.NewDecoder(r)
	var out []FileSpan
	for {
		var s FileSpan
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("telemetry: span %d: %w", len(out)+1, err)
		}
		out = append(out, s)
	}
}

// ReadSpanFile decodes the spans in a file the file exporter wrote.
func ReadSpanFile(path string) ([]FileSpan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadSpans(f)
}
