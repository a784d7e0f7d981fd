package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/supervisorhq/supervisor/coordinator/internal/dashboard"
	"github.com/supervisorhq/supervisor/coordinator/internal/fleet"
	"github.com/supervisorhq/supervisor/coordinator/internal/reporoots"

	"github.com/supervisorhq/supervisor/coordinator/internal/cli/demo"
	"github.com/supervisorhq/supervisor/shared/jobrun"
)

// TestAgentName is the scripted agent the demo runs.
const TestAgentName = "supervisor-test-agent"

func newDemo() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the embedded default end to end on a sample Go repository",
		Long: `demo creates a small Go repository in a temporary directory, starts the embedded
default (NATS, coordinator, worker and gate runner in this process), submits a
workflow of three tasks (two in parallel, one depending on both) whose agent is
the scripted supervisor-test-agent, gates every task with go vet and go test,
prints live progress, and ends with the result branch and its diff stat.

With --fleet it starts nothing and submits the same workflow to the fleet at
--nats instead (e.g. the one make compose-up starts): its workers need
supervisor-test-agent and its gate runners Go, as the images have.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := load(cmd, "demo")
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			return e.demo(ctx, cmd)
		},
	}
	fs := cmd.Flags()
	fs.String("agent-dir", "", "directory holding supervisor-test-agent (default: next to this binary)")
	fs.String("dir", "", "work directory (default: a new temporary directory)")
	fs.Bool("keep", false, "keep the work directory afterwards")
	fs.Bool("verbose", false, "show the fleet's logs")
	fs.Bool("fleet", false, "submit to the running fleet at --nats instead of starting the embedded default")
	addDashboardFlags(cmd, dashboard.DefaultListen, true)
	return cmd
}

func (e *env) demo(ctx context.Context, cmd *cobra.Command) error {
	toFleet := e.v.GetBool("fleet")
	agentDir := e.v.GetString("agent-dir")
	if !toFleet {
		if agentDir == "" {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			agentDir = filepath.Dir(exe)
		}
		agentDir, _ = filepath.Abs(agentDir)
		if _, err := os.Stat(filepath.Join(agentDir, TestAgentName)); err != nil {
			return exitf(ExitUsage, "%s not found in %s; build it with `make build` or pass --agent-dir", TestAgentName, agentDir)
		}
	}
	dir := e.v.GetString("dir")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "supervisor-demo-"); err != nil {
			return err
		}
	}
	if !e.v.GetBool("keep") {
		defer os.RemoveAll(dir)
	}
	repo := filepath.Join(dir, "greet")
	if err := demo.WriteRepo(ctx, repo); err != nil {
		return err
	}
	wfFile := filepath.Join(dir, "demo-workflow.yaml")
	if err := os.WriteFile(wfFile, demo.Workflow(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "== sample repository %s\n== workflow %s\n", repo, wfFile)

	if toFleet {
		fmt.Fprintf(e.out, "== fleet at %s\n", e.v.GetString("nats"))
	} else {
		fleetLog := e.log
		if !e.v.GetBool("verbose") {
			fleetLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		}
		lower, err := e.loadGateSources()
		if err != nil {
			return err
		}
		strategies, err := e.loadStrategies()
		if err != nil {
			return err
		}
		roleSrc, err := e.roleSource()
		if err != nil {
			return err
		}
		policies, err := e.loadRetryPolicies()
		if err != nil {
			return err
		}
		// The coordinator writes into the sample repository only.
		roots, err := reporoots.New([]string{repo})
		if err != nil {
			return err
		}
		st, err := startFleet(ctx, fleet.Options{Gates: lower, RetryPolicies: policies, Strategies: strategies, Roles: roleSrc, RepoRoots: roots,
			DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", WorkerConcurrency: 2, GateConcurrency: 2,
			SandboxPath: agentDir + ":" + jobrun.DefaultSandboxPath(), Log: fleetLog, Tick: 500 * time.Millisecond,
		})
		if err != nil {
			return err
		}
		defer st.Close()
		fmt.Fprintf(e.out, "== embedded fleet up: NATS %s, coordinator, worker, gate runner\n", st.URL())
		stopDashboard, err := e.startDashboard(ctx, cmd, st.URL(), nil, dashboard.DefaultListen, true)
		if err != nil {
			return err
		}
		defer stopDashboard()
		e.v.Set("nats", st.URL())
	}

	e.v.Set("repo", repo)
	e.v.Set("rev", "HEAD")
	e.v.Set("wait", true)
	started := time.Now()
	id, err := e.submitFile(ctx, wfFile)
	if err != nil {
		return err
	}
	branch := "supervisor/" + id
	fmt.Fprintf(e.out, "== workflow %s succeeded in %s\n== branch %s:\n", id, time.Since(started).Round(time.Millisecond), branch)
	for _, args := range [][]string{
		{"log", "--oneline", "--no-decorate", "HEAD.." + branch},
		{"diff", "--stat", "HEAD..." + branch},
	} {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		fmt.Fprint(e.out, string(out))
	}
	return nil
}
