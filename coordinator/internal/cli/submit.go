package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/coordinator/internal/workflow"
	"github.com/supervisorhq/supervisor/shared/bus"
	"github.com/supervisorhq/supervisor/shared/gates"
	"github.com/supervisorhq/supervisor/shared/protocol"
	"github.com/supervisorhq/supervisor/shared/redact"
	"github.com/supervisorhq/supervisor/shared/telemetry"
	"github.com/supervisorhq/supervisor/shared/workspace"
)

func newSubmit() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "submit FILE | submit --template NAME FEATURE.md",
		Short: "Validate a workflow file and submit it; prints the workflow id",
		Long: `submit validates a workflow file (every problem is reported as file:line:col),
uploads a git bundle of the repository's base commit to the object store, and
submits the workflow. It prints the workflow id. With --wait it follows the
workflow to its end, like 'watch', and exits 0 only if it succeeded; the
accepted work is then on branch supervisor/<workflow-id> of --repo. A workflow
with auto_merge is followed until its merge is done (exit 6 if it failed).
The branch --rev names (the checked-out one for HEAD) is recorded as the
default target of 'coordinator merge'. With --template, FILE is a feature
description expanded with that workflow template (see 'coordinator plan').`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := load(cmd, "submit")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			if e.v.GetString("template") != "" {
				name, doc, err := e.expandTemplate(ctx, args[0])
				if err != nil {
					return err
				}
				_, err = e.submitData(ctx, name, doc)
				return err
			}
			_, err = e.submitFile(ctx, args[0])
			return err
		},
	}
	fs := cmd.Flags()
	fs.String("repo", ".", "the git repository the workflow works on")
	fs.String("rev", "HEAD", "the base commit (any git revision)")
	fs.String("template", "", "expand this workflow template with FILE, a feature description")
	fs.Bool("wait", false, "follow the workflow until it ends; exit 0 only if it succeeded")
	fs.Bool("trust-project-gates", false, "use the repository's .supervisor/gates.yaml (its commands run in the sandbox) and .supervisor/roles/, templates/ and context/")
	return cmd
}

// maxWorkflowFile is the largest workflow file submit reads.
const maxWorkflowFile = 1 << 20

// submitFile validates, uploads and submits a workflow file, following it
// with --wait. It returns the workflow id.
func (e *env) submitFile(ctx context.Context, file string) (string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	if fi.Size() > maxWorkflowFile {
		return "", exitf(ExitInvalid, "%s: %d bytes, over the %d-byte limit for a workflow file", file, fi.Size(), maxWorkflowFile)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	return e.submitData(ctx, file, data)
}

// submitData validates, uploads and submits a workflow document; file
// names it in messages. With an exporter configured, its span ("cli
// submit", from validation to the coordinator's answer) is the root of
// the workflow's trace.
func (e *env) submitData(ctx context.Context, file string, data []byte) (string, error) {
	ctx, span := telemetry.Start(ctx, SpanCLISubmit, attribute.String("supervisor.source", filepath.Base(file)))
	ended := false
	endSpan := func(err error) {
		if !ended {
			ended = true
			telemetry.End(span, err)
		}
	}
	defer endSpan(nil)
	repoPath, err := filepath.Abs(e.v.GetString("repo"))
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	commit, err := workspace.ResolveCommit(ctx, repoPath, e.v.GetString("rev"))
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	// Validate here first, against the same gate and role sources the
	// coordinator uses: the user gets every problem without a round trip,
	// and nothing is uploaded for an invalid file.
	src, err := e.localSources(ctx, repoPath, commit)
	if err != nil {
		return "", err
	}
	opts := src.opts
	project := src.projectGates
	if _, err := workflow.ParseWithOptions(file, data, opts); err != nil {
		// The workflow may name gates of the fleet's registry, which only
		// the coordinator knows: fetch them and validate again.
		if reg := e.registryGates(ctx, err); reg != nil {
			opts.UserGates = reg
			_, err = workflow.ParseWithOptions(file, data, opts)
		}
		if err != nil {
			return "", &ExitError{Code: ExitInvalid, Err: err}
		}
	}
	repoID, err := workspace.RepoID(ctx, repoPath)
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	nc, client, err := e.connect(ctx)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	b, err := bus.Attach(ctx, nc, e.log)
	if err != nil {
		return "", &ExitError{Code: ExitUnavailable, Err: err}
	}
	// The branch the work starts from is the default target of a merge.
	baseBranch, err := workspace.CurrentBranch(ctx, repoPath, e.v.GetString("rev"))
	if err != nil {
		return "", &ExitError{Code: ExitUsage, Err: err}
	}
	repo := protocol.RepoRef{ID: repoID, BaseCommit: commit, Bundle: fmt.Sprintf("%s/%s.bundle", repoID, commit)}
	if err := uploadBundle(ctx, b, repoPath, repo); err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, e.v.GetDuration("timeout"))
	defer cancel()
	resp, err := client.Submit(rctx, api.SubmitRequest{Filename: filepath.Base(file), YAML: string(data), Repo: repo,
		RepoPath: repoPath, RepoPathOptional: true, BaseBranch: baseBranch, ProjectGates: project, ProjectRoles: src.projectRoles,
		ProjectContext: src.projectContext})
	if err != nil {
		endSpan(err)
		return "", apiErr(err)
	}
	span.SetAttributes(attribute.String("supervisor.workflow_id", resp.WorkflowID))
	endSpan(nil)
	fmt.Fprintln(e.out, resp.WorkflowID)
	if resp.TraceID != "" {
		fmt.Fprintf(e.errOut, "trace %s\n", resp.TraceID)
	}
	if len(resp.Redacted) > 0 {
		fmt.Fprintf(e.errOut, "coordinator: secrets masked before the workflow was stored, so agents read %s in their place: %s\n",
			redact.Mask, strings.Join(resp.Redacted, "; "))
	}
	if resp.RepoPathDropped != "" {
		fmt.Fprintf(e.errOut, "coordinator: the coordinator will not write into this repository (%s); the branch is "+
			"fetched from the result bundle (--wait, or coordinator watch --repo) and merges are yours to make with git\n",
			resp.RepoPathDropped)
	}
	if !e.v.GetBool("wait") {
		return resp.WorkflowID, nil
	}
	return resp.WorkflowID, e.follow(ctx, b, client, resp.WorkflowID, repoPath)
}

// uploadBundle puts a bundle of the base commit in the object store,
// unless one is there already (bundles are named by repository and commit).
func uploadBundle(ctx context.Context, b *bus.Bus, repoPath string, repo protocol.RepoRef) error {
	if _, err := b.Bundles.GetInfo(ctx, repo.Bundle); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("look up bundle %s: %w", repo.Bundle, err)}
	}
	tmp, err := os.MkdirTemp("", "supervisor-bundle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "base.bundle")
	if err := workspace.CreateBundle(ctx, repoPath, repo.BaseCommit, file); err != nil {
		return &ExitError{Code: ExitFault, Err: err}
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() > protocol.MaxBundleBytes {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("repository %s at %s: %s", repoPath, short(repo.BaseCommit),
			protocol.BundleTooLarge(repo.Bundle, fi.Size()))}
	}
	if _, err := b.Bundles.Put(ctx, jetstream.ObjectMeta{Name: repo.Bundle}, f); err != nil {
		return &ExitError{Code: ExitUnavailable, Err: bus.ObjectPutError(protocol.BucketBundles, repo.Bundle, err)}
	}
	return nil
}

// sources are the gate and role sources a workflow is validated with on
// this side, and the project's files to send along.
type sources struct {
	opts         workflow.Options
	projectGates *api.GateFile
	projectRoles []api.GateFile
	// projectContext are the project's context strategies.
	projectContext []api.GateFile
}

// localSources loads the built-in and user gates and roles, and, when the
// project is trusted, the project's gates and roles at commit (repoPath ""
// skips the project). Retry policies of the coordinator's operator are
// known only there, so any name is accepted here.
func (e *env) localSources(ctx context.Context, repoPath, commit string) (sources, error) {
	var s sources
	lower, err := e.loadGateSources()
	if err != nil {
		return s, err
	}
	strategies, err := e.loadStrategies()
	if err != nil {
		return s, err
	}
	s.opts = workflow.Options{BuiltinGates: lower, AnyRetryPolicy: true, Strategies: strategies}
	trusted := e.v.GetBool("trust-project-gates")
	if repoPath != "" {
		if s.projectGates, err = projectGates(ctx, repoPath, commit, trusted, e.errOut); err != nil {
			return s, err
		}
		if s.projectRoles, err = projectConfigFiles(ctx, repoPath, commit, "roles", trusted, e.errOut); err != nil {
			return s, &ExitError{Code: ExitUsage, Err: err}
		}
		if s.projectContext, err = projectConfigFiles(ctx, repoPath, commit, "context", trusted, e.errOut); err != nil {
			return s, &ExitError{Code: ExitUsage, Err: err}
		}
		if s.opts.Strategies, err = withProjectStrategies(strategies, service.ProjectFiles(s.projectContext)); err != nil {
			return s, err
		}
	}
	if pg := s.projectGates; pg != nil {
		gs, _, err := gates.ParseFile(pg.Filename, []byte(pg.Content), gates.OriginProject)
		if err != nil {
			return s, &ExitError{Code: ExitInvalid, Err: err}
		}
		s.opts.ProjectGates = gates.NewSet(gs...)
	}
	roleSrc, err := e.roleSource()
	if err != nil {
		return s, err
	}
	if s.opts.Roles, err = roleSrc(service.ProjectFiles(s.projectRoles)); err != nil {
		return s, &ExitError{Code: ExitInvalid, Err: err}
	}
	return s, nil
}
