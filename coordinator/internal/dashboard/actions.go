package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/protocol"
)

// confirmData is the confirmation page: what is about to happen, and the
// fields to send again with confirm=1.
type confirmData struct {
	Action  string
	Summary string
	Post    string
	Fields  []field
	Back    string
}

type field struct{ Name, Value string }

// operator reads the decision's author: the form's name, required.
func operator(r *http.Request) (string, error) {
	by := strings.TrimSpace(r.PostFormValue("by"))
	switch {
	case by == "":
		return "", errors.New("say who you are: the operator's name is recorded with the decision")
	case utf8.RuneCountInString(by) > 100 || strings.ContainsAny(by, "\r\n"):
		return "", errors.New("the operator's name must be one line of at most 100 characters")
	}
	return by, nil
}

func (s *Server) rememberOperator(w http.ResponseWriter, by string) {
	http.SetCookie(w, &http.Cookie{Name: operatorCookie, Value: url.QueryEscape(by), Path: "/", MaxAge: 365 * 24 * 3600, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// decide is the inbox's approve, reject and retry: the form first shows
// a confirmation page, whose button sends it again with confirm=1.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	wf, node, action := r.PostFormValue("wf"), r.PostFormValue("node"), r.PostFormValue("action")
	if !protocol.ValidName(wf) || !protocol.ValidName(node) {
		s.renderError(w, r, http.StatusBadRequest, errors.New("the form names no valid workflow and node"))
		return
	}
	back := "/workflows/" + wf + "/nodes/" + node
	by, err := operator(r)
	if err != nil {
		s.renderError(w, r, http.StatusBadRequest, err)
		return
	}
	req := api.DecisionRequest{WorkflowID: wf, NodeID: node, By: by, Note: strings.TrimSpace(r.PostFormValue("note"))}
	var summary string
	switch action {
	case "approve":
		summary = fmt.Sprintf("Approve %s of workflow %s as %s: its latest patch is integrated.", node, wf, by)
		if r.PostFormValue("accept_config") == "1" {
			// TRUST-CONFIG: the patch's changes to .supervisor/ too.
			req.AcceptConfig = true
			summary += " Its changes to .supervisor/ (trusted configuration: gates, roles, templates, context) are accepted too."
		}
	case "reject":
		req.Reason, req.Note = strings.TrimSpace(r.PostFormValue("reason")), ""
		if req.Reason == "" {
			req.Reason = strings.TrimSpace(r.PostFormValue("note"))
		}
		if req.Reason == "" {
			s.renderError(w, r, http.StatusBadRequest, errors.New("a rejection needs a reason (the note field)"))
			return
		}
		summary = fmt.Sprintf("Reject %s of workflow %s as %s: the node fails and its dependents are skipped.", node, wf, by)
	case "retry":
		if a := strings.TrimSpace(r.PostFormValue("attempts")); a != "" {
			n, err := strconv.Atoi(a)
			if err != nil || n < 0 || n > 100 {
				s.renderError(w, r, http.StatusBadRequest, fmt.Errorf("attempts %q: want a number from 0 (the task's budget) to 100", a))
				return
			}
			req.Attempts = n
		}
		summary = fmt.Sprintf("Retry %s of workflow %s as %s: it gets more attempts, the note goes to the agent.", node, wf, by)
	default:
		s.renderError(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q: approve, reject or retry", action))
		return
	}
	if r.PostFormValue("confirm") != "1" {
		p := s.newPage(r, "inbox", "Confirm: "+action)
		p.Refresh = 0
		p.Data = confirmData{Action: action, Summary: summary, Post: "/inbox/decide", Back: back, Fields: []field{
			{"wf", wf}, {"node", node}, {"action", action}, {"by", by}, {"note", r.PostFormValue("note")},
			{"reason", r.PostFormValue("reason")}, {"attempts", r.PostFormValue("attempts")},
			{"accept_config", r.PostFormValue("accept_config")},
		}}
		s.render(w, http.StatusOK, "confirm", p)
		return
	}
	s.rememberOperator(w, by)
	ctx, cancel := s.apiContext(r)
	defer cancel()
	var st api.WorkflowSummary
	switch action {
	case "approve":
		st, err = s.client.Approve(ctx, req)
	case "reject":
		st, err = s.client.Reject(ctx, req)
	default:
		st, err = s.client.Retry(ctx, req)
	}
	if err != nil {
		s.renderError(w, r, statusOf(err), fmt.Errorf("%s %s/%s: %w", action, wf, node, err))
		return
	}
	s.log.Info("dashboard: decision", "action", action, "workflow", wf, "node", node, "by", by)
	msg := fmt.Sprintf("%s: %s by %s; workflow %s", node, action+"d", by, st.Status)
	if action == "retry" {
		msg = fmt.Sprintf("%s: retried by %s; workflow %s", node, by, st.Status)
	}
	http.Redirect(w, r, "/workflows/"+wf+"?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

// breakerReset closes a circuit breaker, after a confirmation page.
func (s *Server) breakerReset(w http.ResponseWriter, r *http.Request) {
	scope := strings.TrimSpace(r.PostFormValue("scope"))
	if scope == "" || len(scope) > 512 {
		s.renderError(w, r, http.StatusBadRequest, errors.New("the form names no breaker scope"))
		return
	}
	by, err := operator(r)
	if err != nil {
		s.renderError(w, r, http.StatusBadRequest, err)
		return
	}
	if r.PostFormValue("confirm") != "1" {
		p := s.newPage(r, "breakers", "Confirm: reset")
		p.Refresh = 0
		p.Data = confirmData{Action: "reset", Post: "/breakers/reset", Back: "/breakers",
			Summary: fmt.Sprintf("Reset the breaker %s as %s: it closes and forgets its failures; held jobs run again.", scope, by),
			Fields:  []field{{"scope", scope}, {"by", by}}}
		s.render(w, http.StatusOK, "confirm", p)
		return
	}
	s.rememberOperator(w, by)
	ctx, cancel := s.apiContext(r)
	defer cancel()
	was, err := s.client.BreakerReset(ctx, api.BreakerResetRequest{Scope: scope, By: by})
	if err != nil {
		s.renderError(w, r, statusOf(err), fmt.Errorf("reset %s: %w", scope, err))
		return
	}
	s.log.Info("dashboard: breaker reset", "scope", scope, "by", by)
	msg := fmt.Sprintf("breaker %s reset by %s (was %s)", scope, by, was.Was.State)
	http.Redirect(w, r, "/breakers?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}
