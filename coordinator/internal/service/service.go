// Package service is the coordinator's request/reply API on NATS
// (sup.api.*), a NATS micro service served while the coordinator leads.
// Each endpoint is a typed function from its request to its reply; it
// reads the workflow state, or hands the engine a command that the state
// machine validates and turns into effects.
package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/gateregistry"
	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/roles"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/contextpack"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/state"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

// Version is reported by the micro service's info endpoint.
const Version = "0.1.0"

// requestTimeout bounds one request's work.
const requestTimeout = 30 * time.Second

// Workflows is what the service needs of the engine.
type Workflows interface {
	// Submit starts a validated workflow and returns its id.
	Submit(ctx context.Context, s statemachine.Submission) (string, error)
	// Read calls fn with the state, read-locked.
	Read(fn func(*statemachine.State))
	// Command runs cmd on workflow wf in its queue and carries out the
	// effects it returns.
	Command(ctx context.Context, wf string, cmd func(*statemachine.Workflow, time.Time) ([]statemachine.Effect, error)) error
	// Recall returns a workflow retired from memory as its events fold
	// (a statemachine.ErrNotFound refusal if it is not retired either).
	Recall(ctx context.Context, wf string) (*statemachine.Workflow, error)
	// FleetCommand runs cmd in the fleet's queue and carries out the
	// effects it returns.
	FleetCommand(ctx context.Context, cmd func(*statemachine.State, time.Time) ([]statemachine.Effect, error)) error
}

// Options configures a Service.
type Options struct {
	// ID names the coordinator in the service's metadata.
	ID string
	// Gates are the gate definitions below the registry in precedence:
	// the built-in sets and the user's file, merged. Workflows may refer
	// to them by name.
	Gates *gates.Set
	// Roles resolves the role catalogue of a submission from its project's
	// role files (nil: no roles).
	Roles RoleSource
	// RetryPolicies are the operator's named retry policies, besides the
	// built-in ones.
	RetryPolicies map[string]protocol.RetryPolicy
	// Breakers are the fleet's circuit breakers (the state store), which
	// the breakers endpoints list and reset, read with BreakerPolicy (zero
	// fields: the defaults).
	Breakers      state.Breakers
	BreakerPolicy state.BreakerPolicy
	Log           *slog.Logger
	// Strategies are the context strategies workflows may name.
	Strategies *contextpack.Catalogue
	// RepoRoots are where a submission's repo_path may lie (the zero
	// value: nowhere, so a submission naming one is refused).
	RepoRoots reporoots.Roots
	// Limits bound request sizes, each client's submission rate and the
	// work in flight (the zero value: none).
	Limits Limits
}

// RoleSource resolves the role catalogue a workflow is parsed with: the
// coordinator's built-in and user roles plus the project's files.
type RoleSource func(project []overlay.File) (*roles.Catalogue, error)

// Service serves the API.
type Service struct {
	wfs      Workflows
	bus      *bus.Bus
	registry *gateregistry.Registry
	lower    *gates.Set
	opts     Options
	log      *slog.Logger
	rate     *rateLimiter
	// submitMu makes the in-flight check and the submission one step.
	submitMu sync.Mutex
}

// New returns the service for wfs on b.
func New(wfs Workflows, b *bus.Bus, opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Gates == nil {
		opts.Gates = &gates.Set{}
	}
	return &Service{wfs: wfs, bus: b, registry: gateregistry.New(b.Gates, opts.Log), lower: opts.Gates,
		opts: opts, log: opts.Log, rate: newRateLimiter(opts.Limits)}
}

// Serve starts the micro service; requests are handled with contexts
// derived from leaderCtx, so none outlives the coordinator's leadership.
func (s *Service) Serve(leaderCtx context.Context) (stop func() error, err error) {
	svc, err := micro.AddService(s.bus.NC, micro.Config{
		Name:        "supervisor",
		Version:     Version,
		Description: "Supervisor coordinator: submit, status, list, cancel, logs and merge of workflows; gates; the human inbox; circuit breakers; the fleet",
		Metadata:    map[string]string{"coordinator": s.opts.ID},
	})
	if err != nil {
		return nil, fmt.Errorf("service: start: %w", err)
	}
	g := svc.AddGroup(protocol.APIPrefix)
	endpoints := map[string]micro.Handler{
		protocol.APISubmit:       endpoint(s, leaderCtx, s.submit, s.checkRate),
		protocol.APIStatus:       endpoint(s, leaderCtx, s.status),
		protocol.APIList:         endpoint(s, leaderCtx, s.list),
		protocol.APICancel:       endpoint(s, leaderCtx, s.cancel),
		protocol.APILogs:         endpoint(s, leaderCtx, s.logs),
		protocol.APIGateRerun:    endpoint(s, leaderCtx, s.gateRerun),
		protocol.APIGateList:     endpoint(s, leaderCtx, s.gateList),
		protocol.APIGateAdd:      endpoint(s, leaderCtx, s.gateAdd),
		protocol.APIGateUpdate:   endpoint(s, leaderCtx, s.gateUpdate),
		protocol.APIGateRemove:   endpoint(s, leaderCtx, s.gateRemove),
		protocol.APIInbox:        endpoint(s, leaderCtx, s.inbox),
		protocol.APIShow:         endpoint(s, leaderCtx, s.show),
		protocol.APIApprove:      endpoint(s, leaderCtx, s.approve),
		protocol.APIReject:       endpoint(s, leaderCtx, s.reject),
		protocol.APIRetry:        endpoint(s, leaderCtx, s.retry),
		protocol.APIResume:       endpoint(s, leaderCtx, s.resume),
		protocol.APIBreakers:     endpoint(s, leaderCtx, s.breakers),
		protocol.APIBreakerReset: endpoint(s, leaderCtx, s.breakerReset),
		protocol.APIMerge:        endpoint(s, leaderCtx, s.merge),
		protocol.APIFleet:        endpoint(s, leaderCtx, s.fleet),
	}
	for name, h := range endpoints {
		if err := g.AddEndpoint(name, h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("service: add endpoint %s: %w", name, err)
		}
	}
	// The server must have the subscriptions before the coordinator says
	// it is ready, so a request sent right after finds a responder.
	if err := s.bus.NC.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("service: flush subscriptions: %w", err)
	}
	return svc.Stop, nil
}

// endpoint adapts a typed handler to the micro service: the request is
// decoded strictly (unknown fields are a 400), the reply encoded as JSON
// (one too large for a NATS message is replied as a 413 instead), and an
// error replied with its API code (500 for anything that is not an
// *api.Error, logged). A request over the size limit is refused (413)
// before anything else, then checks run in order (e.g. the submission
// rate); the first error is the reply.
func endpoint[Req, Resp any](s *Service, leaderCtx context.Context, h func(context.Context, Req) (Resp, error),
	checks ...func(micro.Request) error) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		ctx, cancel := context.WithTimeout(leaderCtx, requestTimeout)
		defer cancel()
		// The caller's span context (the CLI's), if the request carries one.
		ctx = telemetry.Extract(ctx, nats.Header(r.Headers()))
		var req Req
		resp, err := func() (Resp, error) {
			var zero Resp
			for _, check := range append([]func(micro.Request) error{s.checkSize}, checks...) {
				if err := check(r); err != nil {
					return zero, err
				}
			}
			if err := decodeStrict(r.Data(), &req); err != nil {
				return zero, api.BadRequest("malformed request: %v", err)
			}
			return h(ctx, req)
		}()
		if err != nil {
			s.replyError(r, err)
			return
		}
		data, err := json.Marshal(resp)
		if err != nil {
			s.replyError(r, fmt.Errorf("encode the reply: %w", err))
			return
		}
		if max := s.bus.NC.MaxPayload() - replyHeadroom; int64(len(data)) > max {
			// Sent, it would be dropped and the caller would time out as if
			// no coordinator answered.
			s.replyError(r, api.TooLarge("the reply is %d bytes, over the %d bytes NATS's message limit leaves it", len(data), max))
			return
		}
		if err := r.Respond(data); err != nil {
			s.log.Warn("API reply not sent", "subject", r.Subject(), "err", err)
		}
	})
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (s *Service) replyError(r micro.Request, err error) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = api.Internal("%s", err.Error())
		s.log.Error("API request failed", "subject", r.Subject(), "err", err)
	}
	var data []byte
	if len(ae.Problems) > 0 {
		data, _ = json.Marshal(ae.Problems)
	}
	_ = r.Error(fmt.Sprint(ae.Code), oneLine(ae.Description), data)
}

// oneLine keeps a description header-safe.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", "; ")
}

// refusal turns the state machine's refusals into API errors; anything
// else is returned as is (a 500).
func refusal(err error) error {
	var r *statemachine.Refusal
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &r):
		return err
	case errors.Is(err, statemachine.ErrNotFound):
		return api.NotFound("%s", r.Msg)
	case errors.Is(err, statemachine.ErrConflict):
		return api.Conflict("%s", r.Msg)
	}
	return err
}

// readWorkflow calls fn with workflow wf read-locked; a retired workflow
// is read back from its events (Recall); an unknown workflow is a 404.
func (s *Service) readWorkflow(ctx context.Context, wf string, fn func(*statemachine.Workflow) error) error {
	var err error
	found := false
	s.wfs.Read(func(st *statemachine.State) {
		w, ok := st.Workflow(wf)
		if found = ok; ok {
			err = fn(w)
		}
	})
	if found {
		return err
	}
	w, err := s.wfs.Recall(ctx, wf)
	if errors.Is(err, statemachine.ErrNotFound) {
		return api.NotFound("workflow %q not found", wf)
	}
	if err != nil {
		return err
	}
	return fn(w)
}

// summary is workflow wf as the status API reports it.
func (s *Service) summary(ctx context.Context, wf string) (api.WorkflowSummary, error) {
	var out api.WorkflowSummary
	err := s.readWorkflow(ctx, wf, func(w *statemachine.Workflow) error {
		out = Summary(w, true)
		return nil
	})
	return out, err
}
