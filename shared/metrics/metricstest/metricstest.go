// Package metricstest reads a Prometheus text exposition for tests: it
// parses it with the Prometheus text parser (expfmt) and sums samples by
// name and labels.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one exposition, by name.
type Families map[string]*dto.MetricFamily

// Parse parses a text exposition; an exposition the parser refuses is an
// error.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse exposition: %w", err)
	}
	return Families(fams), nil
}

// Scrape fetches url (a /metrics endpoint) and parses it.
func Scrape(ctx context.Context, url string) (Families, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("scrape %s: %s: %s", url, resp.Status, b)
	}
	return Parse(resp.Body)
}

// Has reports whether the family name is in the exposition.
func (f Families) Has(name string) bool { _, ok := f[name]; return ok }

// Sum adds the values of name's samples whose labels match every
// "label=value" pair given ("label=prefix*" matches a prefix): a
// counter's or gauge's value, a histogram's or summary's count.
func (f Families) Sum(name string, labels ...string) float64 {
	fam := f[name]
	if fam == nil {
		return 0
	}
	total := 0.0
	for _, m := range fam.GetMetric() {
		if !matches(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			total += float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// HistogramSum adds the sums of name's histogram samples matching labels.
func (f Families) HistogramSum(name string, labels ...string) float64 {
	fam := f[name]
	if fam == nil {
		return 0
	}
	total := 0.0
	for _, m := range fam.GetMetric() {
		if matches(m, labels) && m.Histogram != nil {
			total += m.GetHistogram().GetSampleSum()
		}
	}
	return total
}

// Series counts name's samples matching labels.
func (f Families) Series(name string, labels ...string) int {
	fam := f[name]
	if fam == nil {
		return 0
	}
	n := 0
	for _, m := range fam.GetMetric() {
		if matches(m, labels) {
			n++
		}
	}
	return n
}

func matches(m *dto.Metric, pairs []string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		got, ok := have[k]
		if !ok {
			return false
		}
		if prefix, ok := strings.CutSuffix(v, "*"); ok {
			if !strings.HasPrefix(got, prefix) {
				return false
			}
		} else if got != v {
			return false
		}
	}
	return true
}
