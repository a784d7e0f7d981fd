package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/jobrun"
)

// pageTemplate is one page: the layout with the page's content.
type pageTemplate = template.Template

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Signed  bool
	CSRF    string
	ReadsOK bool
	// Operator is the name the browser decided with last (a cookie).
	Operator string
	// Refresh is the period, in milliseconds, at which the page reloads
	// its #live part (0: never).
	Refresh int64
	Flash   string
	Err     string
	Inbox   int
	Now     time.Time
	Data    any
}

var pageNames = []string{"workflows", "workflow", "node", "inbox", "confirm", "fleet", "breakers", "login", "error"}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

var funcs = template.FuncMap{
	"age":   age,
	"since": func(t time.Time) string { return age(t, time.Now()) },
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"ptrWhen": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"short":    short,
	"progress": progressOf,
	"dag":      renderDAG,
	"json":     prettyJSON,
	"join":     strings.Join,
	"labels":   jobrun.FormatLabels, // as coordinator fleet prints them
	"ratio": func(hits, misses uint64) string {
		if hits+misses == 0 {
			return "no lookups yet"
		}
		return fmt.Sprintf("%.0f%% hits", 100*float64(hits)/float64(hits+misses))
	},
	"cost": func(s *api.Spend) string {
		if s == nil || s.Runs == 0 {
			return ""
		}
		c := fmt.Sprintf("$%.2f", s.CostUSD)
		if s.CostEstimated {
			c += " (est.)"
		}
		return c
	},
	"exit": func(p *int) string {
		if p == nil {
			return ""
		}
		return fmt.Sprint(*p)
	},
	"ms": func(ms int64) string {
		if ms == 0 {
			return ""
		}
		return (time.Duration(ms) * time.Millisecond).Round(10 * time.Millisecond).String()
	},
	"form": func(p *page, item api.InboxItem) formArgs {
		return formArgs{Item: item, CSRF: p.CSRF, Operator: p.Operator}
	},
}

// age is how long ago t was, roughly: 45s, 12m, 3h5m, 2d4h.
func age(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + age(now, t)
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// short cuts s to n runes, with an ellipsis.
func short(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// progress is a workflow's nodes counted: succeeded of the total, and
// those that failed or wait for a human.
type progress struct {
	Done, Total, Failed, Waiting, Running int
}

func progressOf(counts map[string]int) progress {
	var p progress
	for st, n := range counts {
		p.Total += n
		switch st {
		case "succeeded":
			p.Done += n
		case "failed", "cancelled":
			p.Failed += n
		case "escalated", "awaiting_approval":
			p.Waiting += n
		case "running", "gating", "integrating", "retrying", "ready":
			p.Running += n
		}
	}
	return p
}

func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// newPage fills what every page shows: the session, the inbox's size.
func (s *Server) newPage(r *http.Request, nav, title string) *page {
	p := &page{Title: title, Nav: nav, Signed: s.signedIn(r), ReadsOK: s.openReads, Now: time.Now(),
		Refresh: s.refresh.Milliseconds(), Flash: r.URL.Query().Get("msg"), Inbox: -1}
	if p.Signed {
		p.CSRF = s.csrf
	}
	if c, err := r.Cookie(operatorCookie); err == nil {
		p.Operator, _ = url.QueryUnescape(c.Value)
	}
	ctx, cancel := s.apiContext(r)
	defer cancel()
	if items, err := s.client.Inbox(ctx); err == nil {
		p.Inbox = len(items)
	}
	return p
}

// render writes a page with the given HTTP status.
func (s *Server) render(w http.ResponseWriter, status int, name string, p *page) {
	var b bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&b, "layout.html", p); err != nil {
		s.log.Error("dashboard: rendering a page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// renderError writes the error page.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, status int, err error) {
	p := s.newPage(r, "", http.StatusText(status))
	p.Err = err.Error()
	p.Refresh = 0
	s.render(w, status, "error", p)
}

// formArgs is what the decision form needs.
type formArgs struct {
	Item           api.InboxItem
	CSRF, Operator string
}
