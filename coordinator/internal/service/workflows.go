package service

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/gateregistry"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"
	"github.com/supervisorhq/supervisor/coordinator/internal/statemachine"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/telemetry"
)

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// submit validates a workflow against every gate source and starts it.
// Its span ("submit", a child of the CLI's when the request carries one)
// is the workflow's trace: its context is stored in the
// workflow.submitted event.
func (s *Service) submit(ctx context.Context, req api.SubmitRequest) (resp api.SubmitResponse, err error) {
	ctx, span := telemetry.Start(ctx, SpanSubmit, attribute.String("supervisor.source", req.Filename))
	defer func() {
		span.SetAttributes(attribute.String("supervisor.workflow_id", resp.WorkflowID))
		telemetry.End(span, err)
	}()
	var none api.SubmitResponse
	// Gate sources below the project: the coordinator's built-in and user
	// gates, then the fleet's registry, read afresh so every coordinator
	// sees every change.
	reg, err := s.registry.Load(ctx)
	if err != nil {
		return none, err
	}
	opts := workflow.Options{BuiltinGates: s.lower, UserGates: gateregistry.Gates(reg), RetryPolicies: s.opts.RetryPolicies,
		Strategies: s.opts.Strategies}
	if pg := req.ProjectGates; pg != nil {
		gs, _, err := gates.ParseFile(pg.Filename, []byte(pg.Content), gates.OriginProject)
		if err != nil {
			return none, invalidGate("project gates", err)
		}
		opts.ProjectGates = gates.NewSet(gs...)
	}
	if s.opts.Roles != nil {
		cat, err := s.opts.Roles(ProjectFiles(req.ProjectRoles))
		if err != nil {
			return none, invalidGate("roles", err)
		}
		opts.Roles = cat
	}
	if len(req.ProjectContext) > 0 {
		cat, err := s.opts.Strategies.Over(StrategyLayers(ProjectFiles(req.ProjectContext))...)
		if err != nil {
			return none, invalidGate("context strategies", err)
		}
		opts.Strategies = cat
	}
	spec, err := workflow.ParseWithOptions(req.Filename, []byte(req.YAML), opts)
	if err != nil {
		var ve *workflow.ValidationError
		if errors.As(err, &ve) {
			return none, api.Invalid("workflow is invalid", ve.Problems)
		}
		return none, api.Invalid(err.Error(), nil)
	}
	redacted := redactSpec(spec)
	switch {
	case !commitRE.MatchString(req.Repo.BaseCommit):
		return none, api.BadRequest("repo.base_commit %q is not a full commit id", req.Repo.BaseCommit)
	case req.Repo.ID == "" || req.Repo.Bundle == "":
		return none, api.BadRequest("repo.id and repo.bundle are required")
	}
	info, err := s.bus.Bundles.GetInfo(ctx, req.Repo.Bundle)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return none, api.BadRequest("repository bundle %s is not in bucket %s; upload it before submitting", req.Repo.Bundle, protocol.BucketBundles)
		}
		return none, err
	}
	if max := s.opts.Limits.bundleLimit(); int64(info.Size) > max {
		return none, api.TooLarge("repository bundle %s is %d bytes, over this coordinator's limit of %d (--max-bundle-bytes; "+
			"at most %d, MaxBundleBytes)", req.Repo.Bundle, info.Size, max, int64(protocol.MaxBundleBytes))
	}
	if req.BaseBranch != "" {
		if err := protocol.CheckBranchName(req.BaseBranch); err != nil {
			return none, api.BadRequest("base_branch: %v", err)
		}
	}
	repoPath, dropped, err := s.repoPath(req, spec)
	if err != nil {
		return none, err
	}
	tp := telemetry.TraceParent(ctx)
	s.submitMu.Lock()
	defer s.submitMu.Unlock()
	if err := s.checkInFlight(len(spec.Tasks)); err != nil {
		return none, err
	}
	id, err := s.wfs.Submit(ctx, statemachine.Submission{Spec: spec, Repo: req.Repo, RepoPath: repoPath,
		Source: req.Filename, BaseBranch: req.BaseBranch, TraceParent: tp})
	if err != nil {
		return none, err
	}
	return api.SubmitResponse{WorkflowID: id, Branch: statemachine.BranchName(id), TraceID: telemetry.TraceID(tp),
		RepoPathDropped: dropped, Redacted: redacted}, nil
}

// repoPath is the repository path a submission records: the request's,
// if the coordinator may write into it (under its repo roots). One it may
// not is refused, or with RepoPathOptional left out, dropped saying why;
// a workflow with auto_merge needs it all the same.
func (s *Service) repoPath(req api.SubmitRequest, spec *protocol.WorkflowSpec) (path, dropped string, err error) {
	if req.RepoPath == "" {
		return "", "", nil
	}
	cerr := s.opts.RepoRoots.Check(req.RepoPath)
	switch {
	case cerr == nil:
		return req.RepoPath, "", nil
	case !errors.Is(cerr, reporoots.ErrNotAllowed):
		return "", "", api.BadRequest("%v", cerr)
	case spec.AutoMerge:
		return "", "", api.Forbidden("the coordinator writes branches only into repositories its configuration allows: %v; "+
			"auto_merge needs it to write into the repository", cerr)
	case req.RepoPathOptional:
		return "", cerr.Error(), nil
	}
	return "", "", api.Forbidden("the coordinator writes branches only into repositories its configuration allows: %v", cerr)
}

func (s *Service) status(ctx context.Context, req api.IDRequest) (api.WorkflowSummary, error) {
	return s.summary(ctx, req.WorkflowID)
}

func (s *Service) list(_ context.Context, _ api.IDRequest) (api.ListResponse, error) {
	out := api.ListResponse{Workflows: []api.WorkflowSummary{}}
	s.wfs.Read(func(st *statemachine.State) {
		for _, e := range st.Listing() {
			if e.Workflow != nil {
				out.Workflows = append(out.Workflows, Summary(e.Workflow, false))
			} else {
				out.Workflows = append(out.Workflows, RetiredSummary(e.Retired))
			}
		}
		out.Fleet = fleetStatus(st.Fleet(), time.Now())
	})
	return out, nil
}

func fleetStatus(f *statemachine.Fleet, now time.Time) api.FleetStatus {
	return api.FleetStatus{Paused: f.Paused, Since: timePtr(f.PausedAt), Reason: f.PauseReason,
		FailuresLastHour: f.FailuresWithin(now)}
}

// resume ends a fleet pause.
func (s *Service) resume(ctx context.Context, req api.ResumeRequest) (api.FleetStatus, error) {
	by := strings.TrimSpace(req.By)
	if by == "" {
		return api.FleetStatus{}, api.BadRequest("resuming names who does it (by)")
	}
	// The failed rounds the pause was about, counted before the resume
	// forgives them.
	failures := 0
	err := s.wfs.FleetCommand(ctx, func(st *statemachine.State, now time.Time) ([]statemachine.Effect, error) {
		failures = st.Fleet().FailuresWithin(now)
		return statemachine.Resume(st, by, now)
	})
	if err != nil {
		return api.FleetStatus{}, refusal(err)
	}
	s.log.Info("fleet resumed", "by", by, "failures_last_hour", failures)
	var out api.FleetStatus
	s.wfs.Read(func(st *statemachine.State) { out = fleetStatus(st.Fleet(), time.Now()) })
	out.FailuresLastHour = failures
	return out, nil
}

func (s *Service) cancel(ctx context.Context, req api.IDRequest) (api.WorkflowSummary, error) {
	err := s.wfs.Command(ctx, req.WorkflowID, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		return statemachine.Cancel(w, now)
	})
	if err != nil {
		return api.WorkflowSummary{}, refusal(err)
	}
	return s.summary(ctx, req.WorkflowID)
}

func (s *Service) gateRerun(ctx context.Context, req api.GateRerunRequest) (api.WorkflowSummary, error) {
	err := s.wfs.Command(ctx, req.WorkflowID, func(w *statemachine.Workflow, now time.Time) ([]statemachine.Effect, error) {
		return statemachine.RerunGates(w, req.NodeID, req.Gate, req.NoCache, now)
	})
	if err != nil {
		return api.WorkflowSummary{}, refusal(err)
	}
	return s.summary(ctx, req.WorkflowID)
}
