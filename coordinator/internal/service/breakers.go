package service

// The fleet's circuit breakers: listed from the state store, where the
// runners keep them, and closed by an operator (RETRY-11, HITL-09).

import (
	"context"
	"strings"
	"time"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/shared/state"
)

// breakerStore is the state store's breakers, or a 500 when the service
// was started without one.
func (s *Service) breakerStore() (state.Breakers, error) {
	if s.opts.Breakers == nil {
		return nil, api.Internal("this coordinator was started without the state store's breakers")
	}
	return s.opts.Breakers, nil
}

// breakers lists every breaker with something on record, by scope.
func (s *Service) breakers(ctx context.Context, _ api.IDRequest) (api.BreakersResponse, error) {
	store, err := s.breakerStore()
	if err != nil {
		return api.BreakersResponse{}, err
	}
	list, err := store.BreakerList(ctx)
	if err != nil {
		return api.BreakersResponse{}, err
	}
	p := s.opts.BreakerPolicy.WithDefaults()
	out := api.BreakersResponse{Breakers: []api.BreakerInfo{}, Policy: api.BreakerPolicy{Failures: p.Failures,
		WindowSeconds: p.Window.Seconds(), CoolDownSeconds: p.CoolDown.Seconds()}}
	now := p.CurrentTime()
	for _, b := range list {
		out.Breakers = append(out.Breakers, breakerInfo(b.Scope, b.Breaker, p, now))
	}
	return out, nil
}

// breakerReset closes a breaker and reports what it was; a scope with
// nothing on record is a 404 (most likely a typo), and nothing changes.
func (s *Service) breakerReset(ctx context.Context, req api.BreakerResetRequest) (api.BreakerResetResponse, error) {
	scope := strings.TrimSpace(req.Scope)
	if scope == "" {
		return api.BreakerResetResponse{}, api.BadRequest("a reset names the breaker's scope")
	}
	store, err := s.breakerStore()
	if err != nil {
		return api.BreakerResetResponse{}, err
	}
	was, err := store.BreakerReset(ctx, scope)
	if err != nil {
		return api.BreakerResetResponse{}, err
	}
	if was.Idle() {
		return api.BreakerResetResponse{}, api.NotFound("no circuit breaker %q has anything on record (coordinator breakers lists them)", scope)
	}
	p := s.opts.BreakerPolicy.WithDefaults()
	s.log.Info("circuit breaker reset", "scope", scope, "by", req.By, "was", string(was.State))
	return api.BreakerResetResponse{Was: breakerInfo(scope, was, p, p.CurrentTime())}, nil
}

// breakerInfo describes a stored breaker at now under policy p.
func breakerInfo(scope string, b state.Breaker, p state.BreakerPolicy, now time.Time) api.BreakerInfo {
	info := api.BreakerInfo{Scope: scope, State: string(b.Normalized().State), OpenedAt: timePtr(b.OpenedAt),
		ProbeStartedAt: timePtr(b.ProbeStartedAt)}
	cutoff := now.Add(-p.Window)
	for _, f := range b.FailureTimes {
		if f.After(cutoff) {
			info.Failures++
			info.LastFailure = timePtr(f)
		}
	}
	switch b.State {
	case state.BreakerOpen:
		until := b.OpenedAt.Add(p.CoolDown)
		info.Until, info.ProbeDue = timePtr(until), !now.Before(until)
	case state.BreakerHalfOpen:
		info.Until = timePtr(b.ProbeStartedAt.Add(p.CoolDown))
	}
	return info
}
