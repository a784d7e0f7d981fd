package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// statusOf maps an API error to the page's HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrBadRequest), errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, api.ErrConflict):
		return http.StatusConflict
	default:
		return http.StatusBadGateway
	}
}

// ids reads and checks the path's workflow and node ids: a name that is
// not valid could not name anything, and must not reach a NATS subject.
func ids(r *http.Request, withNode bool) (wf, node string, err error) {
	wf = r.PathValue("wf")
	if !protocol.ValidName(wf) {
		return "", "", fmt.Errorf("%q is not a workflow id (%s)", wf, protocol.NameRule)
	}
	if withNode {
		node = r.PathValue("node")
		if !protocol.ValidName(node) {
			return "", "", fmt.Errorf("%q is not a node id (%s)", node, protocol.NameRule)
		}
	}
	return wf, node, nil
}

// workflowsData is the workflows page: the list, filtered.
type workflowsData struct {
	Workflows []api.WorkflowSummary
	Total     int
	Status    string
	Query     string
	Statuses  []string
	Fleet     api.FleetStatus
}

func (s *Server) workflows(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(r, "workflows", "Workflows")
	ctx, cancel := s.apiContext(r)
	defer cancel()
	d := workflowsData{Status: r.URL.Query().Get("status"), Query: strings.TrimSpace(r.URL.Query().Get("q")),
		Statuses: []string{"running", "needs_attention", "succeeded", "failed", "cancelled"}}
	list, err := s.client.List(ctx)
	if err != nil {
		p.Err = err.Error()
		p.Data = d
		s.render(w, statusOf(err), "workflows", p)
		return
	}
	d.Fleet, d.Total = list.Fleet, len(list.Workflows)
	for i := len(list.Workflows) - 1; i >= 0; i-- { // newest first
		wf := list.Workflows[i]
		if d.Status != "" && string(wf.Status) != d.Status {
			continue
		}
		if d.Query != "" && !strings.Contains(wf.ID, d.Query) && !strings.Contains(strings.ToLower(wf.Name), strings.ToLower(d.Query)) {
			continue
		}
		d.Workflows = append(d.Workflows, wf)
	}
	p.Data = d
	s.render(w, http.StatusOK, "workflows", p)
}

// workflowData is one workflow's page.
type workflowData struct {
	WF    api.WorkflowSummary
	Inbox []api.InboxItem
	// Legend lists the statuses the DAG shows, in a fixed order.
	Legend []string
}

// legend is every node status in the order a node meets them.
var legend = []string{"pending", "ready", "running", "gating", "retrying", "escalated", "awaiting_approval", "integrating", "succeeded", "failed", "skipped", "cancelled"}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	wf, _, err := ids(r, false)
	if err != nil {
		s.renderError(w, r, http.StatusNotFound, err)
		return
	}
	p := s.newPage(r, "workflows", "Workflow "+wf)
	ctx, cancel := s.apiContext(r)
	defer cancel()
	st, err := s.client.Status(ctx, wf)
	if err != nil {
		s.renderError(w, r, statusOf(err), err)
		return
	}
	d := workflowData{WF: st, Legend: legend}
	if items, err := s.client.Inbox(ctx); err == nil {
		for _, it := range items {
			if it.WorkflowID == wf {
				d.Inbox = append(d.Inbox, it)
			}
		}
	}
	p.Title = st.Name + " · " + wf
	p.Data = d
	s.render(w, http.StatusOK, "workflow", p)
}

// nodeData is one node's page.
type nodeData struct {
	WF      string
	Detail  api.NodeDetail
	Logs    []api.LogEntry
	LogsErr string
	Item    *api.InboxItem
}

func (s *Server) node(w http.ResponseWriter, r *http.Request) {
	wf, node, err := ids(r, true)
	if err != nil {
		s.renderError(w, r, http.StatusNotFound, err)
		return
	}
	p := s.newPage(r, "workflows", node+" · "+wf)
	ctx, cancel := s.apiContext(r)
	defer cancel()
	detail, err := s.client.Show(ctx, wf, node)
	if err != nil {
		s.renderError(w, r, statusOf(err), err)
		return
	}
	d := nodeData{WF: wf, Detail: detail}
	slices.Reverse(d.Detail.Attempts) // latest first
	if d.Logs, err = s.client.Logs(ctx, wf, node); err != nil {
		d.LogsErr = err.Error()
	}
	if items, err := s.client.Inbox(ctx); err == nil {
		for i := range items {
			if items[i].WorkflowID == wf && items[i].NodeID == node {
				d.Item = &items[i]
			}
		}
	}
	p.Data = d
	s.render(w, http.StatusOK, "node", p)
}

func (s *Server) inbox(w http.ResponseWriter, r *http.Request) {
	apiPage(s, w, r, "inbox", "Inbox", "", s.client.Inbox)
}

func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	apiPage(s, w, r, "fleet", "Fleet", "the fleet API answered: ", s.client.Fleet)
}

func (s *Server) breakers(w http.ResponseWriter, r *http.Request) {
	apiPage(s, w, r, "breakers", "Circuit breakers", "", s.client.Breakers)
}

// apiPage renders page name with what one API call returns, or with the
// call's error (prefixed by errPrefix) and its status.
func apiPage[T any](s *Server, w http.ResponseWriter, r *http.Request, name, title, errPrefix string,
	call func(context.Context) (T, error)) {
	p := s.newPage(r, name, title)
	ctx, cancel := s.apiContext(r)
	defer cancel()
	data, err := call(ctx)
	if err != nil {
		p.Err = errPrefix + err.Error()
		s.render(w, statusOf(err), name, p)
		return
	}
	p.Data = data
	s.render(w, http.StatusOK, name, p)
}

// login signs a browser in with the token, from the form (POST) or the
// address coordinator dev prints (GET /login?token=…).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var given string
	if r.Method == http.MethodPost {
		if !sameOrigin(r) {
			s.renderError(w, r, http.StatusForbidden, errors.New("sign-in from another site refused"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		given = r.PostFormValue("token")
	} else {
		given = r.URL.Query().Get("token")
	}
	if given != "" && equal(given, s.token) {
		s.setSession(w)
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	p := &page{Title: "Sign in", Nav: "login", Signed: s.signedIn(r), ReadsOK: s.openReads, Inbox: -1}
	status := http.StatusOK
	if given != "" {
		p.Err = "that is not the dashboard's token"
		status = http.StatusUnauthorized
	}
	s.render(w, status, "login", p)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if sameOrigin(r) {
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
